#!/usr/bin/env python3
"""llama-quantize, from the llama.cpp build node-llama-cpp ships (its libllama's
llama_model_quantize, through ctypes): quantize a GGUF file as `llama-quantize IN OUT FTYPE`
would, without an importance matrix.

    llama_quantize.py IN.gguf OUT.gguf Q4_K_M

The struct below is llama_model_quantize_params of that build's include/llama.h (v0.5.0 of
node-llama-cpp's llama.cpp); the defaults come from the library itself."""
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_DIR = os.path.join(HERE, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
FTYPES = {"Q4_0": 2, "Q8_0": 7, "Q4_K_M": 15, "Q6_K": 18}


class QuantizeParams(ctypes.Structure):
    _fields_ = [
        ("nthread", ctypes.c_int32),
        ("ftype", ctypes.c_int),
        ("output_tensor_type", ctypes.c_int),
        ("token_embedding_type", ctypes.c_int),
        ("allow_requantize", ctypes.c_bool),
        ("quantize_output_tensor", ctypes.c_bool),
        ("only_copy", ctypes.c_bool),
        ("pure", ctypes.c_bool),
        ("keep_split", ctypes.c_bool),
        ("dry_run", ctypes.c_bool),
        ("imatrix", ctypes.c_void_p),
        ("kv_overrides", ctypes.c_void_p),
        ("tt_overrides", ctypes.c_void_p),
        ("prune_layers", ctypes.c_void_p),
        ("max_buf_size", ctypes.c_size_t),
    ]


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in FTYPES:
        sys.exit("usage: llama_quantize.py IN.gguf OUT.gguf {%s}" % "|".join(FTYPES))
    ctypes.CDLL(os.path.join(LIB_DIR, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(os.path.join(LIB_DIR, "libggml.v0.5.0.so"), mode=ctypes.RTLD_GLOBAL)
    llama = ctypes.CDLL(os.path.join(LIB_DIR, "libllama.v0.5.0.so"))
    llama.llama_model_quantize_default_params.restype = QuantizeParams
    llama.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.POINTER(QuantizeParams)]
    llama.llama_model_quantize.restype = ctypes.c_uint32
    llama.llama_backend_init()
    params = llama.llama_model_quantize_default_params()
    params.ftype = FTYPES[sys.argv[3]]
    params.nthread = 2
    status = llama.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(),
                                        ctypes.byref(params))
    if status != 0:
        sys.exit("llama_model_quantize failed (%d)" % status)


if __name__ == "__main__":
    main()
