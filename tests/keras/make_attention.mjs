// Keras MultiHeadAttention models with tfjs-layers' own implementation as the oracle (its
// dist/layers/nlp/multihead_attention.js, a port of keras/layers/attention/
// multi_head_attention.py; not in the package's public API, hence esm_loader.mjs). Each model is
// written as make_models.js writes its models (model.json in the TensorFlow.js layers format,
// weights.bin, inputs, tfjs's outputs, io.txt), with the layer's call spelled as Keras itself
// serializes it: Keras 2's [["x", 0, 0, {"value": ["x", 0, 0], ...}]] for one model, Keras 3's
// {"args": [...], "kwargs": {...}} for the other. write_keras_h5 then makes the .h5 files.
//
// Usage: KILN_NPM_MODULES=DIR NODE_PATH=DIR node --loader ./esm_loader.mjs make_attention.mjs OUT_DIR
import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-core/dist/public/chained_ops/register_all_chained_ops.js';
import {MultiHeadAttention} from '@tensorflow/tfjs-layers/dist/layers/nlp/multihead_attention.js';

const {rng, writeNpy} = createRequire(import.meta.url)('./seeded_npy.js');

function keras2Ref(name) { return [name, 0, 0]; }
function keras3Ref(name) {
  return {class_name: '__keras_tensor__', config: {shape: null, dtype: 'float32', keras_history: [name, 0, 0]}};
}

function inputLayer(name, shape) {
  return {class_name: 'InputLayer', name, inbound_nodes: [],
          config: {batch_input_shape: [null, ...shape.slice(1)], dtype: 'float32', name}};
}

// Seeded uniform values in [-scale, scale).
function values(next, size, scale) {
  return Array.from({length: size}, () => (2 * next() - 1) * scale);
}

// One model: an MHA applied to `inputs` (name → [shape, data]) with `call` ({value, key,
// attentionMask, useCausalMask}), weights drawn from `seed`.
function build(dir, spec, seed) {
  const next = rng(seed);
  const tensors = {};
  for (const [name, shape] of Object.entries(spec.inputs)) {
    const size = shape.reduce((a, b) => a * b, 1);
    const data = spec.masks && spec.masks.includes(name) ? spec.maskValues(shape)
                                                         : values(next, size, 1);
    tensors[name] = tf.tensor(data, shape);
  }
  const mha = new MultiHeadAttention({name: 'mha', ...spec.layer});
  const call = {value: tensors[spec.call.value]};
  if (spec.call.key) call.key = tensors[spec.call.key];
  if (spec.call.attention_mask) call.attentionMask = tensors[spec.call.attention_mask].cast('bool');
  if (spec.call.use_causal_mask) call.useCausalMask = true;
  mha.call(tensors[spec.call.query], call);  // builds the sublayers

  // Seeded weights, in the order Keras names them.
  const sublayers = [['query', mha.queryDense], ['key', mha.keyDense], ['value', mha.valueDense],
                     ['attention_output', mha.outputDense]];
  const manifest = [];
  const blobs = [];
  for (const [sub, dense] of sublayers) {
    const fresh = dense.getWeights().map((w, i) => {
      const fanIn = i === 0 ? w.shape.slice(0, sub === 'attention_output' ? 2 : 1).reduce((a, b) => a * b, 1) : 4;
      const data = values(next, w.size, i === 0 ? 1.5 / Math.sqrt(fanIn) : 0.2);
      manifest.push({name: `mha/${sub}/${i === 0 ? 'kernel' : 'bias'}`, shape: w.shape, dtype: 'float32'});
      blobs.push(Float32Array.from(data));
      return tf.tensor(data, w.shape);
    });
    dense.setWeights(fresh);
  }
  const expected = mha.call(tensors[spec.call.query], call);

  const ref = spec.keras3 ? keras3Ref : keras2Ref;
  const inboundNode = spec.keras3
      ? [{args: [ref(spec.call.query), ref(spec.call.value)],
          kwargs: Object.fromEntries(Object.entries(spec.call).filter(([k]) => !['query', 'value'].includes(k))
                                         .map(([k, v]) => [k, typeof v === 'string' ? ref(v) : v]))}]
      : [[[spec.call.query, 0, 0, Object.fromEntries(Object.entries(spec.call).filter(([k]) => k !== 'query')
                                                        .map(([k, v]) => [k, typeof v === 'string' ? ref(v) : v]))]]];
  const layers = Object.entries(spec.inputs).map(([name, shape]) => inputLayer(name, shape));
  layers.push({class_name: 'MultiHeadAttention', name: 'mha', inbound_nodes: inboundNode,
               config: {name: 'mha', trainable: true, dtype: 'float32', num_heads: spec.layer.numHeads,
                        key_dim: spec.layer.keyDim, value_dim: spec.layer.valueDim ?? null, dropout: 0.0,
                        use_bias: spec.layer.useBias ?? true, output_shape: spec.layer.outputShape ?? null,
                        attention_axes: [1], kernel_initializer: {class_name: 'GlorotUniform', config: {seed: null}},
                        bias_initializer: {class_name: 'Zeros', config: {}}}});
  const topology = {class_name: 'Functional', keras_version: '2.11.0', backend: 'tensorflow',
                    config: {name: path.basename(dir), layers,
                             input_layers: Object.keys(spec.inputs).map((n) => [n, 0, 0]),
                             output_layers: [['mha', 0, 0]]}};
  fs.mkdirSync(dir, {recursive: true});
  fs.writeFileSync(path.join(dir, 'model.json'), JSON.stringify({
    format: 'layers-model', modelTopology: topology,
    weightsManifest: [{paths: ['weights.bin'], weights: manifest}]}));
  fs.writeFileSync(path.join(dir, 'weights.bin'), Buffer.concat(blobs.map((b) => Buffer.from(b.buffer))));
  const io = [];
  Object.keys(spec.inputs).forEach((name, i) => {
    writeNpy(path.join(dir, `input${i}.npy`), tensors[name].shape, tensors[name].dataSync());
    io.push(`input ${name} input${i}.npy`);
  });
  writeNpy(path.join(dir, 'expected_mha.npy'), expected.shape, expected.dataSync());
  io.push('output mha expected_mha.npy');
  fs.writeFileSync(path.join(dir, 'io.txt'), io.join('\n') + '\n');
}

const out = process.argv[2];
if (!out) throw new Error('usage: node --loader ./esm_loader.mjs make_attention.mjs OUT_DIR');
await tf.setBackend('cpu');
// Self-attention with a causal mask, value_dim ≠ key_dim (Keras 2 spelling).
build(path.join(out, 'mha_causal'), {
  inputs: {tokens: [2, 5, 8]},
  layer: {numHeads: 2, keyDim: 4, valueDim: 3},
  call: {query: 'tokens', value: 'tokens', use_causal_mask: true},
}, 11);
// Cross-attention: a separate key, an attention mask (each query row keeps at least one key),
// no biases, an output width of its own (Keras 3 spelling).
build(path.join(out, 'mha_cross'), {
  inputs: {query: [2, 4, 6], value: [2, 5, 8], key: [2, 5, 7], mask: [2, 4, 5]},
  masks: ['mask'],
  maskValues: (shape) => Array.from({length: shape.reduce((a, b) => a * b, 1)},
                                    (_, i) => (i % shape[2] === 0 || (i * 7) % 3 !== 0 ? 1 : 0)),
  layer: {numHeads: 3, keyDim: 2, valueDim: 4, useBias: false, outputShape: 5},
  call: {query: 'query', value: 'value', key: 'key', attention_mask: 'mask'},
  keras3: true,
}, 12);
