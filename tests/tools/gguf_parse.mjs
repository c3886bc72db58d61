// Parses a GGUF file with @huggingface/gguf (the Hub's own reader, independent of llama.cpp's
// and of ours) and prints, as one JSON line, its version, key count, architecture and tensor
// infos (name, ggml-order shape, type id, offset in the data section).
// Usage: node gguf_parse.mjs FILE.gguf
import {gguf} from "@huggingface/gguf";

const {metadata, tensorInfos} = await gguf(process.argv[2], {allowLocalFile: true});
const number = (v) => (typeof v === "bigint" ? Number(v) : v);
console.log(JSON.stringify({
  version: number(metadata.version),
  keys: number(metadata.kv_count),
  architecture: metadata["general.architecture"],
  tokens: metadata["tokenizer.ggml.tokens"]?.length,
  tensors: tensorInfos.map((t) => ({name: t.name, dims: t.shape.map(number), type: t.dtype,
                                    offset: number(t.offset)})),
}));
