// Runs an ONNX model in onnxruntime-node (the export checks' runtime):
//
//   node hack/onnxrun.js MODEL OUTPUT OUT.bin NAME:TYPE:DIMS:FILE...
//
// Each input is read from FILE, raw little-endian TYPE (float32 or int64)
// values of shape DIMS (comma-separated); output OUTPUT is written to
// OUT.bin as raw float32. The package comes from NODE_PATH (hack/deps.sh
// installs it under ~/.cache/elasticdl-npm with --ignore-scripts).
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function tensor(spec) {
  const [name, type, dims, file] = spec.split(':');
  const buf = fs.readFileSync(file);
  const raw = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length); // aligned copy
  const data = type === 'int64' ? new BigInt64Array(raw) : new Float32Array(raw);
  return [name, new ort.Tensor(type, data, dims.split(',').map(Number))];
}

async function main() {
  const [model, output, outPath, ...inputs] = process.argv.slice(2);
  if (!inputs.length) throw new Error('usage: onnxrun.js MODEL OUTPUT OUT.bin NAME:TYPE:DIMS:FILE...');
  const session = await ort.InferenceSession.create(model);
  const result = await session.run(Object.fromEntries(inputs.map(tensor)));
  const out = result[output];
  if (!out) throw new Error(`no output ${output}; the model gives ${session.outputNames.join(', ')}`);
  const f = Float32Array.from(out.data);
  fs.writeFileSync(outPath, Buffer.from(f.buffer));
}

main().catch((e) => { console.error(`onnxrun: ${e.message || e}`); process.exit(1); });
