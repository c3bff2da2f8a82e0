#!/usr/bin/env python3
"""test_ptx_stores.py - the tensor-core kernels store out in 16-byte vector stores.

Each of them stages its rows of out in shared memory and copies them to out a 16-byte
chunk per lane (kernel.cu.tpl tile_copy_out, da_device.cuh da_st_v16). Written as a plain
store of an alignas(16) struct, NVVM (NVRTC 13.0) split every chunk into four 4-byte
st.global.u32, for sm_80 and sm_90a alike: four times the store instructions and LSU
requests of the epilogue, in every kernel, with no test or report to show it. This renders
an mma.sync kernel (sm_80) and the warp-specialized wgmma kernels (sm_90a: fused, split,
causal; with K and V by TMA, the sm_90 default, fused and causal), and the _clear row kernel of a plan that leaves rows uncovered (a dilated branch
alone, bf16), with `dilattn gen`, compiles each to PTX with NVRTC and looks in each kernel
(.entry) for the vector store.

Run: python3 tests/test_ptx_stores.py build/dilattn   (ctest -R ptx_stores); skips (exit
77) where no libnvrtc is found ($DILATTN_NVRTC_LIB, $CUDA_HOME/lib64, /usr/local/cuda*)."""
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import check, report

LONGNET5 = dict(segment_lengths=[2048, 4096, 8192, 16384, 32768], dilation_rates=[1, 2, 4, 6, 12])
CONFIGS = {  # name: (config, --mma, arch)
    "dense_sync": (dict(segment_lengths=[2048], dilation_rates=[1]), "sync", "sm_80"),
    "longnet2_ws_fused": (dict(segment_lengths=[2048, 4096], dilation_rates=[1, 2]), "wgmma-ws", "sm_90"),
    "longnet5_ws_split": (LONGNET5, "wgmma-ws", "sm_90"),
    "longnet5_ws_causal": (dict(LONGNET5, causal=True), "wgmma-ws", "sm_90"),
    # the sm_90 default: the same kernels with K and V by TMA
    "longnet2_tma_fused": (dict(segment_lengths=[2048, 4096], dilation_rates=[1, 2]), "wgmma-ws-tma", "sm_90"),
    "longnet5_tma_causal": (dict(LONGNET5, causal=True), "wgmma-ws-tma", "sm_90"),
    "dilated_clear_bf16": (dict(segment_lengths=[4096], dilation_rates=[2], dtype="bfloat16"), "wgmma-ws", "sm_90"),
}
SCALAR32 = re.compile(r"\bst\.global\.[ub]32\b")
VEC16 = re.compile(r"\bst\.global\.v4\.b32\b")


def entries(ptx):
    """{kernel name: its PTX text} for each .entry of ptx."""
    parts = re.split(r"^\.visible \.entry\s+", ptx, flags=re.M)
    return {re.match(r"[\w$]+", p).group(0): p for p in parts[1:]}


def find_nvrtc():
    cands = [os.environ.get("DILATTN_NVRTC_LIB")]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cands += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")))
    cands += sorted(glob.glob("/usr/local/cuda-*/lib64/libnvrtc.so*"))
    for c in filter(None, cands):
        try:
            return ctypes.CDLL(c)
        except OSError:
            continue
    return None


def to_ptx(nvrtc, source, arch):
    """PTX of source for the virtual arch of arch (sm_90a -> compute_90a); (ptx, log)."""
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None) != 0:
        return None, "nvrtcCreateProgram failed"
    opts = [("--gpu-architecture=" + arch.replace("sm_", "compute_")).encode(), b"-std=c++17", b"-default-device"]
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    ptx = None
    if rc == 0:
        nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        nvrtc.nvrtcGetPTX(prog, buf)
        ptx = buf.value.decode()
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx, log.value.decode(errors="replace")


def main():
    cli = os.path.abspath(sys.argv[1])
    nvrtc = find_nvrtc()
    if nvrtc is None:
        print("SKIP: no libnvrtc found ($DILATTN_NVRTC_LIB, $CUDA_HOME/lib64, /usr/local/cuda*)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, DILATTN_CACHE_DIR=os.path.join(d, "cache"), DILATTN_TUNING="0")
        for name, (base, mma, arch) in CONFIGS.items():
            cfg = dict(dict(num_heads=8, num_kv_heads=8, head_dim=64, dtype="float16"), **base)
            path, out = os.path.join(d, name + ".json"), os.path.join(d, name)
            os.mkdir(out)
            with open(path, "w") as f:
                json.dump(cfg, f)
            r = subprocess.run([cli, "gen", path, "--target", "cuda", "--arch", arch, "--mma", mma, "-o", out],
                               capture_output=True, text=True, env=env)
            sources = glob.glob(os.path.join(out, "*.cu"))
            check(r.returncode == 0 and len(sources) == 1, f"{name}: gen: rc {r.returncode}, {sources}, {r.stderr[-400:]}")
            if not sources:
                continue
            # the warp-specialized kernels compile for sm_90a, as the runtime does
            target = "sm_90a" if mma.startswith("wgmma") else arch
            ptx, log = to_ptx(nvrtc, open(sources[0]).read(), target)
            check(ptx is not None, f"{name}: NVRTC to PTX for {target}: {log[-600:]}")
            if ptx is None:
                continue
            kernels = entries(ptx)
            main = [k for k in kernels if k.endswith(("_branch", "_fused"))]
            check(len(main) == 1, f"{name}: one _branch or _fused kernel in the PTX: {sorted(kernels)}")
            if name.startswith("dilated"):  # _clear, where its heads leave rows uncovered
                main += [k for k in kernels if k.endswith("_clear")]
                check(len(main) == 2, f"{name}: a _clear kernel: {sorted(kernels)}")
            for k in main:
                v4, s32 = len(VEC16.findall(kernels[k])), len(SCALAR32.findall(kernels[k]))
                check(v4 >= 1, f"{name} ({target}) {k}: out's 16-byte chunks in st.global.v4.b32: {v4} "
                               f"(4-byte stores: {s32}, four a chunk when the 16-byte store is split)")
                check(s32 < 4, f"{name} ({target}) {k}: {s32} 4-byte st.global (a split 16-byte store leaves four a chunk)")
    report()


if __name__ == "__main__":
    main()
