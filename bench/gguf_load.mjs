// One llama.cpp model load (node-llama-cpp, CPU, mmap with MAP_POPULATE as llama.cpp does by
// default): prints the seconds loadModel took.
// Usage: node bench/gguf_load.mjs MODEL.gguf   (node-llama-cpp from tests/tools/node_modules)
import {getLlama, LlamaLogLevel} from "../tests/tools/node_modules/node-llama-cpp/dist/index.js";

const llama = await getLlama({gpu: false, build: "never", skipDownload: true,
                              logLevel: LlamaLogLevel.error});
const started = process.hrtime.bigint();
const model = await llama.loadModel({modelPath: process.argv[2], useMmap: true});
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
await model.dispose();
console.log(seconds.toFixed(3));
