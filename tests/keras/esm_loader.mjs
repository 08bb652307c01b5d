// A Node module loader that lets make_attention.mjs import tfjs-layers' MultiHeadAttention,
// which the package builds (dist/layers/nlp/, a port of Keras's multi_head_attention.py) but
// leaves out of its CommonJS bundle. The ES-module build in dist/ uses extensionless relative
// imports and no "type": "module", so this loader adds the ".js" and loads those files as
// modules; @tensorflow/* resolves from KILN_NPM_MODULES (ES modules ignore NODE_PATH).
import {existsSync} from 'node:fs';
import {fileURLToPath, pathToFileURL} from 'node:url';

const esmBuild = /\/@tensorflow\/tfjs-(layers|core)\/dist\//;
const modules = process.env.KILN_NPM_MODULES || '/opt/kiln/npm/node_modules';

export async function resolve(specifier, context, next) {
  if (specifier.startsWith('@tensorflow/'))
    return next(specifier, {...context, parentURL: pathToFileURL(modules + '/').href});
  const relative = specifier.startsWith('./') || specifier.startsWith('../');
  if (relative && context.parentURL && esmBuild.test(context.parentURL) && !specifier.endsWith('.js')) {
    const file = new URL(specifier + '.js', context.parentURL);
    return next(existsSync(fileURLToPath(file)) ? specifier + '.js' : specifier + '/index.js', context);
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (esmBuild.test(url) && url.endsWith('.js') && !url.endsWith('.node.js'))
    return next(url, {...context, format: 'module'});
  return next(url, context);
}
