"""The k-quants people download (Q4_K_M, Q5_K_M, Q6_K), made by llama.cpp's own quantizer.

llama-cpp-python's low-level binding exposes `llama_model_quantize`, the function behind
llama.cpp's `llama-quantize` tool: it reads a 16/32-bit GGUF and writes the quantised one,
with llama.cpp's per-tensor choices (the "_M" mixes keep some tensors at higher precision;
a tensor whose rows are not a multiple of 256 falls back to a legacy type llama.cpp picks).
The converter writes Q8_0 itself (gguf_convert); everything here starts from its output.
"""

from __future__ import annotations

import os
from pathlib import Path

from tunelab.export.plan import ExportFailed

# tunelab's name -> llama.cpp's `llama_ftype` constant in the binding.
K_QUANTS = {"q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M", "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K"}


def quantize(source: Path, out_file: Path, quant: str) -> Path:
    """Quantise the GGUF `source` into `out_file` as `quant` (a key of K_QUANTS)."""
    import llama_cpp  # plan_export has checked that it is installed
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, K_QUANTS[quant])
    params.nthread = max(1, (os.cpu_count() or 1))
    code = llama_cpp.llama_model_quantize(str(source).encode(), str(out_file).encode(), params)
    if code != 0 or not out_file.is_file():
        raise ExportFailed(f"llama.cpp's quantizer could not make {quant} from {source.name} (code {code}); its messages are above")
    return out_file
