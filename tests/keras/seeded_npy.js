// What make_models.js and make_attention.mjs share: a seeded generator and an .npy writer
// (no tfjs here: make_attention.mjs loads tfjs-layers as ES modules, and a second, CommonJS copy
// beside it would split its class registry).
'use strict';
const fs = require('fs');

// mulberry32: a small seeded PRNG, so every run writes the same weights and inputs.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function writeNpy(file, shape, data, descr = '<f4') {
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const body = Buffer.from((descr === '<i4' ? new Int32Array(data) : new Float32Array(data)).buffer);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'), body]));
}

module.exports = {rng, writeNpy};
