"""dilattn.py - a small ctypes binding of libdilattn.so for the benchmarks and tests:
config dict -> plan -> execute on raw pointers (numpy arrays on the host backend, torch
CUDA tensors on the CUDA backend, on torch's current stream).

    lib = Dilattn("build/libdilattn.so")
    plan = lib.plan(config, backend="host")
    plan.execute(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, batch, seq_len, stream=0)

Used by bench/bench_gpu.py and tests/test_ctypes.py.
"""
import ctypes
import json

BACKENDS = {"auto": 0, "host": 1, "cuda": 2}


class DaArgs(ctypes.Structure):
    """Mirror of da_args in include/dilattn.h."""
    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p), ("lse", ctypes.c_void_p),
        ("batch", ctypes.c_int64), ("seq_len", ctypes.c_int64),
        ("q_stride", ctypes.c_int64 * 3), ("k_stride", ctypes.c_int64 * 3),
        ("v_stride", ctypes.c_int64 * 3), ("out_stride", ctypes.c_int64 * 3),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
        ("stream", ctypes.c_void_p),
    ]


class DaPlanOptions(ctypes.Structure):
    """Mirror of da_plan_options in include/dilattn.h (0 = the planner's default)."""
    _fields_ = [("tile_q", ctypes.c_int), ("tile_k", ctypes.c_int), ("fused_min_queries", ctypes.c_int),
                ("seq_len_hint", ctypes.c_int64), ("cuda_mma", ctypes.c_int)]


class DilattnError(RuntimeError):
    pass


class Dilattn:
    SPEC_BYTES = 8192  # larger than sizeof(da_spec); the struct is filled by the library

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.da_context_create.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        L.da_context_last_error.restype = ctypes.c_char_p
        L.da_context_last_error.argtypes = [ctypes.c_void_p]
        L.da_spec_from_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p,
                                        ctypes.c_char_p, ctypes.c_size_t]
        L.da_plan_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                     ctypes.POINTER(ctypes.c_void_p)]
        L.da_plan_create_ex.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                        ctypes.POINTER(DaPlanOptions), ctypes.POINTER(ctypes.c_void_p)]
        L.da_plan_destroy.argtypes = [ctypes.c_void_p]
        L.da_plan_execute.argtypes = [ctypes.c_void_p, ctypes.POINTER(DaArgs)]
        L.da_plan_workspace_size.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                             ctypes.POINTER(ctypes.c_size_t)]
        for name in ("da_plan_kernel_name", "da_plan_strategy", "da_plan_cache_key"):
            getattr(L, name).restype = ctypes.c_char_p
            getattr(L, name).argtypes = [ctypes.c_void_p]
        L.da_plan_backend.argtypes = [ctypes.c_void_p]
        self.ctx = ctypes.c_void_p()
        if L.da_context_create(ctypes.byref(self.ctx)) != 0:
            raise DilattnError("da_context_create failed")

    def error(self):
        return (self.lib.da_context_last_error(self.ctx) or b"").decode()

    def plan(self, config, backend="auto", tile_q=0, tile_k=0, fused_min_queries=0, cuda_mma=0, seq_len_hint=0):
        """tile_q / tile_k / fused_min_queries / cuda_mma: da_plan_options (0: the planner's
        default, or the tuning database's entry when all are 0); cuda_mma 1 = mma.sync, 2 = wgmma,
        4 = wgmma-ws, 6 = wgmma-ws-tma (sm_90; include/dilattn.h). seq_len_hint: the sequence
        length the plan will mostly run at, whose shape bucket of the tuning database it takes
        (0: the bucket of 65536)."""
        text = json.dumps(config).encode()
        spec = ctypes.create_string_buffer(self.SPEC_BYTES)
        msg = ctypes.create_string_buffer(1024)
        if self.lib.da_spec_from_json(text, len(text), spec, msg, 1024) != 0:
            raise DilattnError(msg.value.decode())
        handle = ctypes.c_void_p()
        opts = DaPlanOptions(tile_q, tile_k, fused_min_queries, seq_len_hint, cuda_mma)
        if self.lib.da_plan_create_ex(self.ctx, spec, BACKENDS[backend], ctypes.byref(opts), ctypes.byref(handle)) != 0:
            raise DilattnError(self.error())
        return Plan(self, handle, config, spec)


class Plan:
    def __init__(self, lib, handle, config, spec):
        self.lib, self.handle, self.config, self._spec = lib, handle, config, spec
        L = lib.lib
        self.kernel = L.da_plan_kernel_name(handle).decode()
        self.cache_key = L.da_plan_cache_key(handle).decode()  # differs with the tiles; the name does not
        self.strategy = L.da_plan_strategy(handle).decode()
        self.backend = {1: "host", 2: "cuda"}.get(L.da_plan_backend(handle), "?")

    def workspace_size(self, batch, seq_len):
        n = ctypes.c_size_t()
        if self.lib.lib.da_plan_workspace_size(self.handle, batch, seq_len, ctypes.byref(n)) != 0:
            raise DilattnError(self.lib.error())
        return n.value

    def workspace_min_size(self, batch, seq_len):
        """The least workspace an execution accepts (runs of tokens); a library older than
        da_plan_workspace_min_size has no runs: da_plan_workspace_size."""
        f = getattr(self.lib.lib, "da_plan_workspace_min_size", None)
        if f is None:
            return self.workspace_size(batch, seq_len)
        f.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_size_t)]
        n = ctypes.c_size_t()
        if f(self.handle, batch, seq_len, ctypes.byref(n)) != 0:
            raise DilattnError(self.lib.error())
        return n.value

    def execute(self, q, k, v, out, lse, batch, seq_len, stream=0, strides=None, workspace=0,
                workspace_bytes=0):
        """Pointers as ints. strides: dict with q/k/v/out -> (b, n, h) element strides;
        default contiguous [B, N, H, D]."""
        c = self.config
        H, Hkv, D = c["num_heads"], c.get("num_kv_heads", c["num_heads"]), c["head_dim"]
        st = strides or {
            "q": (seq_len * H * D, H * D, D), "out": (seq_len * H * D, H * D, D),
            "k": (seq_len * Hkv * D, Hkv * D, D), "v": (seq_len * Hkv * D, Hkv * D, D)}
        a = DaArgs(q, k, v, out, lse or None, batch, seq_len,
                   (ctypes.c_int64 * 3)(*st["q"]), (ctypes.c_int64 * 3)(*st["k"]),
                   (ctypes.c_int64 * 3)(*st["v"]), (ctypes.c_int64 * 3)(*st["out"]),
                   workspace or None, workspace_bytes, stream or None)
        if self.lib.lib.da_plan_execute(self.handle, ctypes.byref(a)) != 0:
            raise DilattnError(self.lib.error())

    def __del__(self):
        try:
            self.lib.lib.da_plan_destroy(self.handle)
        except Exception:
            pass
