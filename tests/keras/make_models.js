// Builds Keras models with TensorFlow.js (tfjs-layers on the pure-JavaScript CPU backend), gives
// them seeded random weights, saves each in the TensorFlow.js layers format (model.json +
// weights.bin, what model.save writes) and saves a fixed input and tfjs's prediction as .npy.
// tests/keras/check_keras.sh runs kiln on the same files and compares.
//
// Usage: node make_models.js OUT_DIR   (NODE_PATH must reach the @tensorflow packages:
//        scripts/setup.sh installs them into /opt/kiln/npm)
'use strict';
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs-core');
require('@tensorflow/tfjs-backend-cpu');
const tfl = require('@tensorflow/tfjs-layers');

const {rng, writeNpy} = require('./seeded_npy.js');

// Seeded weights: kernels and biases around 0 with a scale that keeps activations in range;
// batch-norm variances positive and means non-zero, so that every weight matters.
function randomizeWeights(model, seed) {
  const next = rng(seed);
  for (const layer of model.layers) {
    const weights = layer.getWeights();
    if (weights.length === 0) continue;
    const fresh = weights.map((w, i) => {
      const name = layer.weights[i].name;
      const size = w.size;
      const values = new Float32Array(size);
      const fanIn = w.shape.length > 1 ? w.shape.slice(0, -1).reduce((a, b) => a * b, 1) : 4;
      const scale = 1.5 / Math.sqrt(fanIn);
      for (let k = 0; k < size; ++k) {
        const u = next() - 0.5;
        if (name.endsWith('moving_variance')) values[k] = 0.5 + next();
        else if (name.endsWith('gamma')) values[k] = 0.75 + 0.5 * next();
        else values[k] = name.endsWith('kernel') ? 2 * u * scale : 0.4 * u;
      }
      return tf.tensor(values, w.shape);
    });
    layer.setWeights(fresh);
  }
}

// tokens: when given, the inputs are int32 token ids below it rather than floats in [-1, 1).
async function save(model, dir, inputShapes, seed, tokens = 0) {
  fs.mkdirSync(dir, {recursive: true});
  await model.save(tf.io.withSaveHandler(async (artifacts) => {
    const manifest = {
      format: 'layers-model',
      generatedBy: 'TensorFlow.js tfjs-layers v' + tfl.version_layers,
      convertedBy: null,
      modelTopology: artifacts.modelTopology,
      weightsManifest: [{paths: ['weights.bin'], weights: artifacts.weightSpecs}],
    };
    fs.writeFileSync(path.join(dir, 'model.json'), JSON.stringify(manifest));
    fs.writeFileSync(path.join(dir, 'weights.bin'), Buffer.from(artifacts.weightData));
    return {modelArtifactsInfo: {dateSaved: new Date(), modelTopologyType: 'JSON'}};
  }));
  const next = rng(seed + 7);
  const inputs = inputShapes.map((shape, i) => {
    const size = shape.reduce((a, b) => a * b, 1);
    if (tokens > 0) {
      const ids = Array.from({length: size}, () => Math.floor(next() * tokens));
      writeNpy(path.join(dir, `input${i}.npy`), shape, ids, '<i4');
      return tf.tensor(ids, shape, 'int32');
    }
    const values = Array.from({length: size}, () => 2 * next() - 1);
    writeNpy(path.join(dir, `input${i}.npy`), shape, values);
    return tf.tensor(values, shape);
  });
  let outputs = model.predict(inputs.length === 1 ? inputs[0] : inputs);
  if (!Array.isArray(outputs)) outputs = [outputs];
  const names = model.outputNames;
  outputs.forEach((out, i) => writeNpy(path.join(dir, `expected_${names[i]}.npy`), out.shape, out.dataSync()));
  fs.writeFileSync(path.join(dir, 'io.txt'),
                   model.inputNames.map((n, i) => `input ${n} input${i}.npy`).concat(
                       names.map((n) => `output ${n} expected_${n}.npy`)).join('\n') + '\n');
}

// A Sequential CNN: conv, max pool, strided 'same' conv, batch norm, ReLU, Flatten → Dense.
function sequentialCnn() {
  const m = tfl.sequential({name: 'seq_cnn'});
  m.add(tfl.layers.conv2d({inputShape: [12, 12, 3], filters: 8, kernelSize: 3, activation: 'relu', name: 'conv_a'}));
  m.add(tfl.layers.maxPooling2d({poolSize: 2, name: 'pool_a'}));
  m.add(tfl.layers.conv2d({filters: 16, kernelSize: 3, strides: 2, padding: 'same', name: 'conv_b'}));
  m.add(tfl.layers.batchNormalization({name: 'bn_b'}));
  m.add(tfl.layers.reLU({name: 'relu_b'}));
  m.add(tfl.layers.flatten({name: 'flat'}));
  m.add(tfl.layers.dense({units: 10, activation: 'softmax', name: 'probs'}));
  return m;
}

// A Functional model with branches: Add, Multiply, Concatenate, depthwise and separable
// convolutions, zero padding taken by a strided conv, 'same' average pooling, global pools,
// and two outputs (one 4-D, which kiln returns in NHWC).
function functionalBranches() {
  const x = tfl.input({shape: [9, 9, 4], name: 'image'});
  const a = tfl.layers.conv2d({filters: 6, kernelSize: 3, padding: 'same', activation: 'relu', name: 'branch_a'}).apply(x);
  const b = tfl.layers.conv2d({filters: 6, kernelSize: 1, useBias: false, name: 'branch_b'}).apply(x);
  const sum = tfl.layers.add({name: 'sum'}).apply([a, b]);
  const gate = tfl.layers.activation({activation: 'sigmoid', name: 'gate'}).apply(b);
  const product = tfl.layers.multiply({name: 'product'}).apply([a, gate]);
  const joined = tfl.layers.concatenate({name: 'joined'}).apply([sum, product]);
  const dw = tfl.layers.depthwiseConv2d({kernelSize: 3, depthMultiplier: 2, padding: 'same', activation: 'elu', name: 'dw'}).apply(joined);
  const sep = tfl.layers.separableConv2d({filters: 8, kernelSize: 3, strides: 2, padding: 'same', name: 'sep'}).apply(dw);
  const padded = tfl.layers.zeroPadding2d({padding: [[1, 0], [0, 1]], name: 'pad'}).apply(sep);
  const f = tfl.layers.conv2d({filters: 8, kernelSize: 2, strides: 2, activation: 'tanh', name: 'features'}).apply(padded);
  const p = tfl.layers.averagePooling2d({poolSize: 2, strides: 1, padding: 'same', name: 'avg'}).apply(f);
  const g1 = tfl.layers.globalAveragePooling2d({name: 'gap'}).apply(p);
  const g2 = tfl.layers.globalMaxPooling2d({name: 'gmp'}).apply(f);
  const h = tfl.layers.concatenate({name: 'pooled'}).apply([g1, g2]);
  const l = tfl.layers.leakyReLU({alpha: 0.1, name: 'leaky'}).apply(h);
  const out = tfl.layers.dense({units: 5, activation: 'softmax', name: 'scores'}).apply(l);
  return tfl.model({inputs: x, outputs: [out, f], name: 'branches'});
}

// Zero padding before max pooling (concatenated zeros), dilation, batch norm after pooling,
// ELU, Reshape round trips, a capped ReLU, Dropout (identity at inference) and a Softmax layer.
function sequentialMisc() {
  const m = tfl.sequential({name: 'seq_misc'});
  m.add(tfl.layers.zeroPadding2d({inputShape: [8, 8, 2], padding: 1, name: 'pad_in'}));
  m.add(tfl.layers.conv2d({filters: 4, kernelSize: 3, dilationRate: 2, activation: 'tanh', name: 'dilated'}));
  m.add(tfl.layers.zeroPadding2d({padding: 1, name: 'pad_pool'}));
  m.add(tfl.layers.maxPooling2d({poolSize: 3, strides: 2, name: 'pool'}));
  m.add(tfl.layers.batchNormalization({name: 'bn', epsilon: 0.01}));
  m.add(tfl.layers.elu({name: 'elu'}));
  m.add(tfl.layers.reshape({targetShape: [9, 4], name: 'to_seq'}));
  m.add(tfl.layers.reshape({targetShape: [3, 3, 4], name: 'to_image'}));
  m.add(tfl.layers.reLU({maxValue: 0.5, name: 'capped'}));
  m.add(tfl.layers.flatten({name: 'flat'}));
  m.add(tfl.layers.dropout({rate: 0.3, name: 'drop'}));
  m.add(tfl.layers.dense({units: 7, name: 'hidden'}));
  m.add(tfl.layers.leakyReLU({name: 'leaky'}));
  m.add(tfl.layers.dense({units: 3, name: 'logits'}));
  m.add(tfl.layers.softmax({name: 'probs'}));
  return m;
}

// A token classifier, the way transformers start: int32 ids → Embedding → LayerNormalization
// → Dense over the sequence's last axis → Flatten → Dense + softmax.
function sequenceTokens() {
  const ids = tfl.input({shape: [6], dtype: 'int32', name: 'ids'});
  const e = tfl.layers.embedding({inputDim: 11, outputDim: 8, name: 'embed'}).apply(ids);
  const n = tfl.layers.layerNormalization({epsilon: 1e-5, name: 'norm'}).apply(e);
  const h = tfl.layers.dense({units: 5, activation: 'relu', name: 'mix'}).apply(n);
  const f = tfl.layers.flatten({name: 'flat'}).apply(h);
  const out = tfl.layers.dense({units: 4, activation: 'softmax', name: 'probs'}).apply(f);
  return tfl.model({inputs: ids, outputs: out, name: 'tokens'});
}

async function main() {
  const out = process.argv[2];
  if (!out) throw new Error('usage: node make_models.js OUT_DIR');
  await tf.setBackend('cpu');
  const models = [
    ['seq_cnn', sequentialCnn(), [[2, 12, 12, 3]]],
    ['branches', functionalBranches(), [[2, 9, 9, 4]]],
    ['seq_misc', sequentialMisc(), [[3, 8, 8, 2]]],
    ['tokens', sequenceTokens(), [[3, 6]], 11],
  ];
  let seed = 1;
  for (const [name, model, shapes, tokens] of models) {
    randomizeWeights(model, seed);
    await save(model, path.join(out, name), shapes, seed, tokens || 0);
    seed += 1;
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
