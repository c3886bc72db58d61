// Loads a GGUF file with llama.cpp (node-llama-cpp's prebuilt CPU build, no download, no
// compiler) and prints, as one JSON line: the tokens of TEXT, their detokenization, the
// metadata llama.cpp read, and the raw logits after each token.
// Usage: node llama_cpp_run.mjs MODEL.gguf TEXT
import {getLlama, LlamaLogLevel, readGgufFileInfo} from "node-llama-cpp";

const [path, text] = process.argv.slice(2);
const info = await readGgufFileInfo(path, {readTensorInfo: true});
const llama = await getLlama({gpu: false, build: "never", skipDownload: true,
                              logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: path, useMmap: true});
const tokens = Array.from(model.tokenize(text));
const context = await model.createContext({contextSize: 128, threads: 1});
const sequence = context.getSequence();
const results = await sequence.controlledEvaluate(
    tokens.map((token) => [token, {generateNext: {logits: true}}]));
const logits = results.map((result) => {
  const row = new Array(info.metadata.tokenizer.ggml.tokens.length).fill(null);
  for (const [token, value] of result.next.logits) row[token] = value;
  return row;
});
console.log(JSON.stringify({
  tokens,
  detokenized: model.detokenize(tokens),
  architecture: info.metadata.general.architecture,
  tensorCount: info.tensorInfo.length,
  tensors: info.tensorInfo.map((t) => ({name: t.name, dims: t.dimensions.map(Number),
                                        type: t.ggmlType, offset: Number(t.offset)})),
  logits,
}));
await context.dispose();
await model.dispose();
