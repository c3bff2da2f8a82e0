#!/usr/bin/env python3
"""test_cli.py - the `dilattn` command as a user drives it: gen/run/info, the golden
cases through `run` (NPY in and out), bf16 through <u2, and bad input of every kind
(malformed or unknown config fields, invalid values, arrays whose shape or dtype
disagrees with the config, truncated or corrupt NPY) exiting 2 with a message saying
what and where, and leaving no output file behind.

Run: python3 tests/test_cli.py build/dilattn ../shared/golden   (ctest -R cli)
Needs numpy.
"""
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np

DILATTN = os.path.abspath(sys.argv[1])
GOLDEN = os.path.abspath(sys.argv[2])
FAKE_CUDA = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None  # tests/fake_cuda.c
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, file=sys.stderr)


def run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([DILATTN, *args], capture_output=True, text=True, env=e)
    return p.returncode, p.stdout, p.stderr


def run_to_full(*args, env=None):
    """Run with stdout on /dev/full (every write fails with ENOSPC): (exit code, stderr)."""
    e = dict(os.environ)
    e.update(env or {})
    with open("/dev/full", "w") as full:
        p = subprocess.run([DILATTN, *args], stdout=full, stderr=subprocess.PIPE, text=True, env=e)
    return p.returncode, p.stderr


def tol(dtype):
    return {"float32": 2e-5, "float16": 1e-2, "bfloat16": 3e-2}[dtype]


def test_info():
    rc, out, err = run("info")
    check(rc == 0, f"info exit {rc}: {err}")
    try:
        info = json.loads(out)
        check(info["backends"]["host"]["available"] is True, "info: host backend not available")
        check("version" in info, "info: no version")
        check(info["workspace_limit"] is None or "DILATTN_WORKSPACE_LIMIT" in os.environ,
              f"info: workspace_limit {info['workspace_limit']} without DILATTN_WORKSPACE_LIMIT")
    except (ValueError, KeyError) as ex:
        check(False, f"info output is not the expected JSON: {ex}: {out}")
    # the limit plans would take, or why they refuse it
    for text, want in (("512M", 512 << 20), ("3k", 3072)):
        rc, out, err = run("info", env={"DILATTN_WORKSPACE_LIMIT": text})
        check(rc == 0 and json.loads(out)["workspace_limit"] == want, f"info, limit {text}: {out} {err}")
    # the disk cache's budget as the cache reads it: junk (a sign) takes the default, with a warning
    for text, want, warns in (("", 4 << 30, False), ("512M", 512 << 20, False), ("-5", 4 << 30, True)):
        rc, out, err = run("info", env={"DILATTN_CACHE_MAX_BYTES": text})
        check(rc == 0 and json.loads(out)["cache_max_bytes"] == want and ("DILATTN_CACHE_MAX_BYTES" in err) == warns,
              f"info, cache budget {text!r}: {out} {err}")
    # CC is words (its program the first): the host backend is available with "cc -O3"
    for text, want in (("cc -O3", True), ("no-such-compiler-xyz cc", False)):
        rc, out, err = run("info", env={"CC": text})
        host = json.loads(out)["backends"]["host"] if rc == 0 else {}
        check(host.get("available") is want and host.get("cc") == text, f"info, CC={text!r}: {out} {err}")
    # JIT off, and the kernels DILATTN_BUNDLES registers (a bundle that cannot be, a warning)
    bdir = tempfile.mkdtemp(prefix="dilattn-info-")
    cfg = os.path.join(GOLDEN, "gqa_4_to_1", "case.json")
    brc, _, berr = run("gen", cfg, "--bundle", "inf", "-o", bdir)
    man = os.path.join(bdir, "manifest.json")
    for env, jit_off, arts, warn in (({}, False, 0, False), ({"DILATTN_DISABLE_JIT": "1"}, True, 0, False),
                                     ({"DILATTN_DISABLE_JIT": "off"}, False, 0, False),
                                     ({"DILATTN_BUNDLES": man}, False, 1, False),
                                     ({"DILATTN_BUNDLES": man + ":" + bdir + "/absent.json"}, False, 1, True)):
        rc, out, err = run("info", env=env)
        got = json.loads(out) if rc == 0 else {}
        check(brc == 0 and got.get("jit_disabled") is jit_off and got.get("bundle_artifacts") == arts
              and ("DILATTN_BUNDLES" in err) == warn, f"info, {env}: {out} {err} {berr}")
    shutil.rmtree(bdir, ignore_errors=True)
    rc, out, err = run("info", env={"DILATTN_WORKSPACE_LIMIT": "lots"})
    lim = json.loads(out)["workspace_limit"] if rc == 0 else None
    check(isinstance(lim, dict) and "not a number of bytes" in lim.get("error", ""), f"info, limit 'lots': {out} {err}")


def test_gen(tmp):
    cfgs = sorted(os.path.join(GOLDEN, d, "case.json") for d in os.listdir(GOLDEN))
    d1, d2 = os.path.join(tmp, "g1"), os.path.join(tmp, "g2")
    os.mkdir(d1)
    os.mkdir(d2)
    rc, out, err = run("gen", *cfgs, "-o", d1)
    check(rc == 0, f"gen exit {rc}: {err}")
    files = sorted(os.listdir(d1))
    check(len(files) == len(cfgs), f"gen wrote {len(files)} files for {len(cfgs)} configs")
    rc, out, err = run("gen", *cfgs, "-o", d2)
    for f in files:
        a = open(os.path.join(d1, f), "rb").read()
        b = open(os.path.join(d2, f), "rb").read()
        check(a == b, f"gen is not deterministic for {f}")
        check(a.startswith(b"/* dilattn "), f"{f} does not open with the banner")
    rc, out, err = run("gen", cfgs[0], "-o", d1, "--report")
    check(rc == 0, f"gen --report exit {rc}: {err}")
    try:
        rep = json.loads(out.strip().splitlines()[0])
        check(rep["kernel"] and rep["compile_ms"] > 0, f"report: {rep}")
    except (ValueError, KeyError, IndexError) as ex:
        check(False, f"gen --report output: {ex}: {out}")
    rc, _, err = run("gen", cfgs[0], "-o", os.path.join(tmp, "nope"))
    check(rc == 2 and "No such file or directory" in err, f"gen into missing folder: {rc} {err}")
    rc, _, err = run("gen", cfgs[0], "-o", cfgs[1])
    check(rc == 2 and "not a folder" in err, f"gen into a file: {rc} {err}")
    rc, _, err = run("gen", cfgs[0], "--target", "cuda", "--arch", "sm_90", "-o", d1)
    check(rc in (0, 3, 4), f"gen --target cuda: exit {rc} {err}")
    # two configs of one kernel: compiled once, each file named once, one report line a
    # kernel (the kernel was compiled, and its lines printed, once a config); the bundle
    # still gives both configs their entry points
    d3 = os.path.join(tmp, "g3")
    os.mkdir(d3)
    twin = os.path.join(tmp, "twin.json")
    shutil.copy(cfgs[0], twin)
    count = os.path.join(tmp, "cc-count")
    cc = os.path.join(tmp, "counting-cc")
    open(cc, "w").write(f"#!/bin/sh\necho x >> {count}\nexec cc \"$@\"\n")
    os.chmod(cc, 0o755)
    for flags, nlines in ((["--compile"], 1), (["--compile", "--report"], 1), ([], 1),
                          (["--compile", "--bundle", "tw"], 4)):
        if os.path.exists(count):
            os.remove(count)
        rc, out, err = run("gen", cfgs[0], twin, *flags, "-o", d3, env={"CC": cc})
        lines = out.splitlines()
        compiles = len(open(count).read().split()) if os.path.exists(count) else 0
        check(rc == 0 and len(lines) == nlines and len(set(lines)) == nlines
              and compiles == (1 if "--compile" in flags else 0),
              f"gen {flags} of two configs of one kernel: exit {rc}, {compiles} compiles, lines {lines}: {err}")
    h = open(os.path.join(d3, "tw.h")).read()
    check("tw_case_plan" in h and "tw_twin_plan" in h, "a bundle of two configs of one kernel lacks an entry point")
    rc, out, err = run("gen", cfgs[0], twin, "--target", "cuda", "--arch", "sm_80", "--report", "-o", d3)
    check(rc in (3, 4) or (rc == 0 and len(out.splitlines()) == 1),
          f"gen --target cuda --report of two configs of one kernel: exit {rc}: {out} {err}")
    # --arch sm_90,sm_90a: one sm_90 cubin a config (mma.sync), each config's bundle item
    # one artifact of it, the two configs one compile and one file
    d4 = os.path.join(tmp, "g4")
    os.mkdir(d4)
    rc, out, err = run("gen", cfgs[0], twin, "--target", "cuda", "--arch", "sm_90,sm_90a", "--compile", "--bundle",
                       "nn", "-o", d4)
    if rc == 0:
        man = json.load(open(os.path.join(d4, "manifest.json")))
        arts = [[a["arch"] for a in k["artifacts"]] for k in man["kernels"]]
        cubins = [ln for ln in out.splitlines() if ln.endswith(".cubin")]
        check(arts == [["sm_90"], ["sm_90"]] and len(cubins) == 1 and cubins[0].endswith(".sm_90.cubin"),
              f"gen --arch sm_90,sm_90a of two configs of one kernel: artifacts {arts}, lines {out.splitlines()}")
    else:
        check(rc in (3, 4), f"gen --arch sm_90,sm_90a: exit {rc}: {err}")


def test_gen_wgmma(tmp):
    """gen --mma wgmma: sm_90 compiles as sm_90a with zero spills; other arches, the host
    target, unknown values and specs the path does not serve are refused with a reason."""
    d = os.path.join(tmp, "wg")
    os.mkdir(d)
    cfg = os.path.join(tmp, "wg.json")
    base = dict(segment_lengths=[256, 512], dilation_rates=[1, 2], num_heads=4, num_kv_heads=4, head_dim=64,
                dtype="float16", causal=True)
    json.dump(base, open(cfg, "w"))
    rc, out, err = run("gen", cfg, "--target", "cuda", "--arch", "sm_90", "--mma", "wgmma", "--report", "-o", d)
    if rc == 4 and "nvrtc" in err.lower():
        print("gen --mma wgmma --report: NVRTC not available, compile checks skipped")
    else:
        check(rc == 0, f"gen --mma wgmma: exit {rc}: {err}")
        try:
            rep = json.loads(out.strip().splitlines()[0])
            check(rep["arch"] == "sm_90a" and rep["path"] == "wgmma" and rep["spill_bytes"] == 0 and
                  rep["wgmma_serialized"] == 0 and rep["kernel"].endswith("_wgmma"), f"gen --mma wgmma report: {rep}")
        except (ValueError, KeyError, IndexError) as ex:
            check(False, f"gen --mma wgmma output: {ex}: {out}")
        # the variants: their own kernel names, sm_90a, no spill, no serialized wgmma
        for mma, suffix, threads in (("wgmma-overlap", "_wgmmao", (128, 256)), ("wgmma-ws", "_wgmmaw", (256, 384)),
                                     ("wgmma-ws-p2", "_wgmmaw2", (384,)), ("wgmma-ws-tma", "_wgmmat", (384, 512))):
            rc, out, err = run("gen", cfg, "--target", "cuda", "--mma", mma, "--report", "-o", d)
            try:
                rep = json.loads(out.strip().splitlines()[0])
                check(rc == 0 and rep["arch"] == "sm_90a" and rep["spill_bytes"] == 0 and rep["wgmma_serialized"] == 0 and
                      rep["kernel"].endswith(suffix) and rep["threads"] in threads, f"gen --mma {mma} report: {rep}")
            except (ValueError, KeyError, IndexError) as ex:
                check(False, f"gen --mma {mma}: exit {rc}: {ex}: {out} {err}")
        # a bundle's typed _plan asks for the instruction its kernels were compiled for
        rc, out, err = run("gen", cfg, "--target", "cuda", "--arch", "sm_90", "--mma", "wgmma", "--compile",
                           "--bundle", "wgb", "-o", d)
        header = open(os.path.join(d, "wgb.h")).read() if rc == 0 else ""
        check(rc == 0 and "o.cuda_mma = 2;" in header and "sm_90a" in open(os.path.join(d, "manifest.json")).read(),
              f"gen --mma wgmma --bundle: exit {rc}: {err}")
        # a plain CUDA bundle names mma.sync, so DILATTN_CUDA_MMA cannot send its plans past its kernels
        d3 = os.path.join(tmp, "wg3")
        os.mkdir(d3)
        rc, out, err = run("gen", cfg, "--target", "cuda", "--arch", "sm_90", "--compile", "--bundle", "syb", "-o", d3)
        header = open(os.path.join(d3, "syb.h")).read() if rc == 0 else ""
        check(rc == 0 and "o.cuda_mma = 1;" in header, f"gen --bundle (cuda): exit {rc}: {err}")
    # arches are checked before anything is written: exit 2, no file
    d2 = os.path.join(tmp, "wg2")
    os.mkdir(d2)
    rc, out, err = run("gen", cfg, "--target", "cuda", "--arch", "sm_80,sm_90", "--mma", "wgmma", "-o", d2)
    check(rc == 2 and "sm_90" in err and "sm_80" in err and not os.listdir(d2),
          f"gen --mma wgmma for sm_80: exit {rc}, files {os.listdir(d2)}: {err}")
    rc, _, err = run("gen", cfg, "--mma", "wgmma", "-o", d)
    check(rc == 2 and "cuda target" in err, f"gen --mma for the host target: exit {rc}: {err}")
    rc, _, err = run("gen", cfg, "--target", "cuda", "--mma", "fast", "-o", d)
    check(rc == 2 and "--mma fast" in err, f"gen --mma fast: exit {rc}: {err}")
    for bad in (dict(dtype="float32"), dict(head_dim=96)):
        json.dump(dict(base, **bad), open(cfg, "w"))
        rc, _, err = run("gen", cfg, "--target", "cuda", "--mma", "wgmma", "-o", d2)
        check(rc == 2 and "wgmma" in err and "head_dim 64 or 128" in err and not os.listdir(d2),
              f"gen --mma wgmma for {bad}: exit {rc}: {err}")
    # grouped mode takes no offsets: "block" there is valid, generates, and says it does nothing
    for offs, warned in (("block", True), ("mod", False)):
        json.dump(dict(base, mode="grouped", offsets=offs), open(cfg, "w"))
        rc, _, err = run("gen", cfg, "-o", d)
        check(rc == 0 and ("no effect in grouped mode" in err) == warned,
              f"gen, grouped with offsets {offs}: exit {rc}, want a warning: {warned}: {err}")
    # the warp-specialized variant takes sparse layouts too (their tile verdicts on named barriers)
    json.dump(dict(base, sparsity=dict(layout="local_window", block=8, window=1)), open(cfg, "w"))
    rc, _, err = run("gen", cfg, "--target", "cuda", "--mma", "wgmma-ws", "-o", d2)
    check(rc == 0 and len(os.listdir(d2)) == 1, f"gen --mma wgmma-ws, sparse: exit {rc}: {err}")
    # ... but not its P double-buffered form: the planner refuses, as bad input (exit 2),
    # with its reason and no Lua traceback
    rc, _, err = run("gen", cfg, "--target", "cuda", "--mma", "wgmma-ws-p2", "-o", d2)
    check(rc == 2 and "no sparse layout" in err and "traceback" not in err and len(os.listdir(d2)) == 1,
          f"gen --mma wgmma-ws-p2, sparse: exit {rc}: {err}")
    rc, _, err = run("gen", cfg, "--target", "cuda", "--mma", "wgmma-ws-tma", "-o", d2)
    check(rc == 2 and "sparse layout" in err and "wgmma-ws-tma" in err and len(os.listdir(d2)) == 1,
          f"gen --mma wgmma-ws-tma, sparse: exit {rc}: {err}")


def test_old_templates(tmp):
    """CUDA split plans launch no _init / _finish: templates whose branch launches do not
    write out themselves (an older version's DILATTN_TEMPLATE_DIR) are refused, not run
    with out left unwritten. Emulated here by renaming da_split_side in a copy; likewise
    run_tiles (WS_TILES) for a plan whose grid runs two tiles a CTA."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "templates")
    old = os.path.join(tmp, "old", "templates")
    shutil.copytree(src, old)
    for root, _, names in os.walk(old):
        for name in names:
            p = os.path.join(root, name)
            text = open(p).read()
            open(p, "w").write(text.replace("da_split_side(", "da_split_old("))
    cfg = os.path.join(tmp, "split.json")
    json.dump(dict(segment_lengths=[64, 128], dilation_rates=[1, 16], num_heads=2, num_kv_heads=2, head_dim=32,
                   dtype="float16"), open(cfg, "w"))  # lcm 16 > g / 16 queries: split
    d = os.path.join(tmp, "old-out")
    os.mkdir(d)
    rc, _, err = run("gen", cfg, "--target", "cuda", "-o", d, env={"DILATTN_TEMPLATE_DIR": old})
    check(rc != 0 and "predate split plans" in err, f"gen with pre-epilogue templates: exit {rc}: {err}")
    rc, _, err = run("gen", cfg, "--target", "cuda", "-o", d)
    check(rc == 0, f"gen of the split config: exit {rc}: {err}")
    rc, _, err = run("gen", cfg, "--target", "host", "-o", d, env={"DILATTN_TEMPLATE_DIR": old})
    check(rc == 0, f"host target with those templates (its split is self-contained): exit {rc}: {err}")
    # a warp-specialized causal plan runs two tiles a CTA, its grid launched so: templates
    # whose kernel runs one a CTA are refused the same way
    for root, _, names in os.walk(old):
        for name in names:
            p = os.path.join(root, name)
            text = open(p).read()
            open(p, "w").write(text.replace("da_split_old(", "da_split_side(").replace("#define WS_TILES", "#define WS_TILES_OLD"))
    json.dump(dict(segment_lengths=[256, 512], dilation_rates=[1, 2], num_heads=2, num_kv_heads=2, head_dim=64,
                   dtype="float16", causal=True), open(cfg, "w"))
    rc, _, err = run("gen", cfg, "--target", "cuda", "--mma", "wgmma-ws", "-o", d, env={"DILATTN_TEMPLATE_DIR": old})
    check(rc != 0 and "tiles a CTA" in err, f"gen with one-tile-a-CTA templates: exit {rc}: {err}")
    rc, _, err = run("gen", cfg, "--target", "cuda", "--mma", "wgmma-ws", "-o", d)
    check(rc == 0, f"gen of the warp-specialized causal config: exit {rc}: {err}")


def test_run_golden(tmp):
    for case in sorted(os.listdir(GOLDEN)):
        d = os.path.join(GOLDEN, case)
        cfg = json.load(open(os.path.join(d, "case.json")))
        out, lse = os.path.join(tmp, case + "_out.npy"), os.path.join(tmp, case + "_lse.npy")
        rc, _, err = run("run", os.path.join(d, "case.json"), "--q", os.path.join(d, "q.npy"),
                         "--k", os.path.join(d, "k.npy"), "--v", os.path.join(d, "v.npy"),
                         "-o", out, "--lse", lse, "--backend", "host")
        check(rc == 0, f"run {case}: exit {rc}: {err}")
        if rc:
            continue
        v = np.load(os.path.join(d, "v.npy")).astype(np.float64)
        vmax = np.abs(v).max()
        got, want = np.load(out), np.load(os.path.join(d, "out.npy"))
        check(got.dtype == np.load(os.path.join(d, "q.npy")).dtype, f"{case}: out dtype {got.dtype}")
        err_out = np.abs(got.astype(np.float64) - want).max()
        check(err_out <= tol(cfg["dtype"]) * vmax, f"{case}: out error {err_out}")
        gl, wl = np.load(lse), np.load(os.path.join(d, "lse.npy"))
        check(gl.dtype == np.float32 and gl.shape == wl.shape, f"{case}: lse {gl.dtype} {gl.shape}")
        fin = np.isfinite(wl)
        check(np.array_equal(fin, np.isfinite(gl)), f"{case}: -inf lse pattern differs")
        check(np.all(gl[~fin] == -np.inf), f"{case}: masked rows not -inf")
        check(not np.isnan(got.astype(np.float64)).any(), f"{case}: NaN in out")
        lt = 1e-4 if cfg["dtype"] == "float32" else 1e-2
        check(np.abs(gl[fin] - wl[fin]).max(initial=0) <= lt, f"{case}: lse error")
        leftovers = [f for f in os.listdir(tmp) if ".tmp" in f]
        check(not leftovers, f"temp files left behind: {leftovers}")


def golden_run_args(case="gqa_4_to_1"):
    g = os.path.join(GOLDEN, case)
    return [os.path.join(g, "case.json"), "--q", os.path.join(g, "q.npy"), "--k", os.path.join(g, "k.npy"),
            "--v", os.path.join(g, "v.npy"), "--backend", "host"]


def test_run_outputs(tmp):
    """A failing run leaves existing outputs as they were: out is not written (nor removed)
    when lse cannot be, and the other way round; -o and --lse naming one file, however
    spelt, are refused before anything runs."""
    d = os.path.join(tmp, "outs")
    os.mkdir(d)
    args = golden_run_args()
    out, lse = os.path.join(d, "o.npy"), os.path.join(d, "l.npy")
    for f in (out, lse):
        open(f, "wb").write(b"keep")
    rc, so, err = run("run", *args, "-o", out, "--lse", os.path.join(tmp, "nodir", "l.npy"))
    check(rc == 2 and "l.npy" in err and os.path.exists(out) and open(out, "rb").read() == b"keep",
          f"run with an unwritable --lse: exit {rc}, out {'kept' if os.path.exists(out) else 'deleted'}: {err}")
    rc, so, err = run("run", *args, "-o", os.path.join(tmp, "nodir", "o.npy"), "--lse", lse)
    check(rc == 2 and open(lse, "rb").read() == b"keep", f"run with an unwritable -o: exit {rc}: {err}")
    check(not [f for f in os.listdir(d) if ".tmp" in f], f"temp files left: {os.listdir(d)}")
    # both written when both can be
    rc, so, err = run("run", *args, "-o", out, "--lse", lse)
    check(rc == 0 and np.load(out).ndim == 4 and np.load(lse).ndim == 3, f"run -o --lse: exit {rc}: {err}")
    # -o and --lse naming one file: refused (exit 2) before anything runs, nothing written
    os.symlink(d, os.path.join(tmp, "outs-link"))
    os.link(out, os.path.join(d, "o-hard.npy"))
    for o, l in ((out, out), (out, os.path.join(d, ".", "o.npy")), (out, os.path.join(tmp, "outs-link", "o.npy")),
                 (os.path.join(d, "new.npy"), os.path.join(d, "..", "outs", "new.npy")),
                 (out, os.path.join(d, "o-hard.npy"))):
        before = open(out, "rb").read()
        rc, so, err = run("run", *args, "-o", o, "--lse", l)
        check(rc == 2 and "same file" in err and not so and open(out, "rb").read() == before
              and not os.path.exists(os.path.join(d, "new.npy")),
              f"run -o {o} --lse {l}: exit {rc}: {so} {err}")
    # a folder as an output: refused before anything runs
    rc, so, err = run("run", *args, "-o", out, "--lse", d)
    check(rc == 2 and open(out, "rb").read() == before, f"run --lse <a folder>: exit {rc}: {err}")
    # the file size limit (ulimit -f) below out's size: exit 2 naming it, both files as they
    # were, no temp left (SIGXFSZ had killed the run with its temps there)
    import resource
    lse_before = open(lse, "rb").read()
    p = subprocess.run([DILATTN, "run", *args, "-o", out, "--lse", lse], capture_output=True, text=True,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)))
    check(p.returncode == 2 and "o.npy" in p.stderr and "too large" in p.stderr and open(out, "rb").read() == before
          and open(lse, "rb").read() == lse_before and not [f for f in os.listdir(d) if ".tmp" in f],
          f"run under a 4 KiB file size limit: exit {p.returncode}, {sorted(os.listdir(d))}: {p.stderr}")


def test_run_special_outputs(tmp):
    """Outputs that are no plain file name (helper-55): a symlink keeps being a link and its
    target gets the data; a FIFO and /dev/stdout are written into (the summary line then on
    stderr), a character device is never replaced by a file (as root, `-o /dev/null` used to
    turn /dev/null into a regular file); an output naming an input, or a config, is refused
    before anything runs; a name 11 bytes short of NAME_MAX works (its temp's name was too
    long)."""
    import stat
    import threading
    d = os.path.join(tmp, "special")
    os.mkdir(d)
    args = golden_run_args()
    # a symlink, and a dangling one: replaced by the new file, never written through (root
    # must not write where another user's link in /tmp points), their targets untouched
    for target in ("real.npy", "dangling-target.npy"):
        link = os.path.join(d, "link-" + target)
        if target == "real.npy":
            open(os.path.join(d, target), "wb").write(b"old")
        os.symlink(target, link)
        rc, so, err = run("run", *args, "-o", link)
        untouched = (open(os.path.join(d, target), "rb").read() == b"old" if target == "real.npy"
                     else not os.path.exists(os.path.join(d, target)))
        check(rc == 0 and not os.path.islink(link) and np.load(link).ndim == 4 and untouched,
              f"run -o <a symlink to {target}>: exit {rc}, link {'kept' if os.path.islink(link) else 'replaced'}, "
              f"target {'untouched' if untouched else 'WRITTEN'}: {err}")
    # a FIFO: written into (a reader waiting on it gets the NPY)
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    rc, so, err = run("run", *args, "-o", fifo)
    reader.join(30)
    check(rc == 0 and stat.S_ISFIFO(os.stat(fifo).st_mode) and got and got[0][:6] == b"\x93NUMPY",
          f"run -o <a FIFO>: exit {rc}, {len(got[0]) if got else 0} bytes read: {err}")
    # stdout by its descriptor's names: the NPY on stdout, the summary on stderr (never
    # /dev/stdout itself here: a broken build would replace it); a link of ours to one is a
    # link like any other, replaced
    for o in ("/proc/self/fd/1", "/dev/fd/1"):
        p = subprocess.run([DILATTN, "run", *args, "-o", o], capture_output=True)
        check(p.returncode == 0 and p.stdout[:6] == b"\x93NUMPY" and b'"kernel"' in p.stderr,
              f"run -o {o}: exit {p.returncode}, stdout {p.stdout[:8]!r}, stderr {p.stderr[-200:]!r}")
    own = os.path.join(d, "stdout")
    os.symlink("/proc/self/fd/1", own)
    p = subprocess.run([DILATTN, "run", *args, "-o", own], capture_output=True)
    check(p.returncode == 0 and not os.path.islink(own) and np.load(own).ndim == 4 and b'"kernel"' in p.stdout,
          f"run -o <a link to /proc/self/fd/1>: exit {p.returncode}: {p.stderr[-200:]!r}")
    # a FIFO with no reader: refused at once (it waited for one forever), nothing replaced;
    # a reader that leaves early: exit 2 with a message (SIGPIPE killed it half-way), the
    # file outputs as they were
    lonely = os.path.join(d, "lonely")
    os.mkfifo(lonely)
    keep = os.path.join(d, "keep.npy")
    open(keep, "wb").write(b"keep")
    try:
        p = subprocess.run([DILATTN, "run", *args, "-o", keep, "--lse", lonely], capture_output=True, timeout=60)
        check(p.returncode == 2 and b"no reader" in p.stderr and open(keep, "rb").read() == b"keep",
              f"run --lse <a FIFO with no reader>: exit {p.returncode}: {p.stderr[-200:]!r}")
    except subprocess.TimeoutExpired:
        check(False, "run --lse <a FIFO with no reader> hung")
    p = subprocess.Popen([DILATTN, "run", *args, "-o", "/proc/self/fd/1", "--lse", keep], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read()
    p.wait(60)
    check(p.returncode == 2 and b"Broken pipe" in err and open(keep, "rb").read() == b"keep",
          f"run -o <stdout, its reader gone after 10 bytes>: exit {p.returncode}, --lse "
          f"{'kept' if open(keep, 'rb').read() == b'keep' else 'REPLACED'}: {err[-200:]!r}")
    # a character device (a private copy of /dev/null, made where we may: as root)
    if os.geteuid() == 0:
        dev = os.path.join(d, "null")
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        rc, so, err = run("run", *args, "-o", dev, "--lse", os.path.join(d, "lse.npy"))
        check(rc == 0 and stat.S_ISCHR(os.stat(dev).st_mode), f"run -o <a character device>: exit {rc}, now "
              f"{'a device' if stat.S_ISCHR(os.stat(dev).st_mode) else 'A REGULAR FILE'}: {err}")
    # the process's own descriptors are written as they stand: appended where stdout is
    # opened to append (it was reopened at offset 0, over the log's start); -o and --lse
    # both on stdout are one file, refused
    log = os.path.join(d, "log")
    open(log, "wb").write(b"x" * 1000)
    with open(log, "ab") as f:
        p = subprocess.run([DILATTN, "run", *args, "-o", "/proc/self/fd/1"], stdout=f, stderr=subprocess.PIPE)
    data = open(log, "rb").read()
    check(p.returncode == 0 and data[:1000] == b"x" * 1000 and data[1000:1006] == b"\x93NUMPY",
          f"run -o <stdout appending to a log>: exit {p.returncode}, log starts {data[:8]!r}, at 1000 {data[1000:1008]!r}")
    p = subprocess.run([DILATTN, "run", *args, "-o", "/proc/self/fd/1", "--lse", "/dev/fd/1"], capture_output=True)
    check(p.returncode == 2 and b"same file" in p.stderr, f"run -o stdout --lse stdout: exit {p.returncode}: {p.stderr}")
    if os.geteuid() == 0:
        # another user's link (in a sticky folder, say /tmp) is not followed: it is replaced,
        # its target untouched (root wrote where nobody's link pointed); a block device is
        # never written
        victim = os.path.join(d, "victim")
        open(victim, "wb").write(b"secret")
        planted = os.path.join(d, "planted.npy")
        os.symlink(victim, planted)
        os.lchown(planted, 65534, 65534)
        rc, so, err = run("run", *args, "-o", planted)
        check(rc == 0 and open(victim, "rb").read() == b"secret" and not os.path.islink(planted),
              f"run -o <another user's link>: exit {rc}, target {open(victim, 'rb').read()[:8]!r}: {err}")
        blk = os.path.join(d, "blk")
        os.mknod(blk, 0o600 | stat.S_IFBLK, os.makedev(7, 250))
        rc, so, err = run("run", *args, "-o", blk)
        check(rc == 2 and "block device" in err and stat.S_ISBLK(os.stat(blk).st_mode),
              f"run -o <a block device>: exit {rc}: {err}")
        # a write that fails after -o was renamed into place (--lse a full device): -o's old
        # file restored, also where its name is near NAME_MAX (its backup's name was too long
        # to make, and the old file was deleted)
        full = os.path.join(d, "full")
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        for n in (20, 250):
            old = os.path.join(d, "z" * (n - 4) + ".npy")
            open(old, "wb").write(b"old output")
            rc, so, err = run("run", *args, "-o", old, "--lse", full)
            kept = os.path.exists(old) and open(old, "rb").read() == b"old output"
            check(rc == 2 and kept, f"run -o <an existing {n}-byte name> --lse <a full device>: exit {rc}, "
                  f"old output {'kept' if kept else 'LOST'}: {err}")
    # tune's CSV to stdout: the CSV whole there, its summary lines on stderr (they were
    # flushed over the CSV's start)
    tcsv = os.path.join(d, "tune_stdout.csv")
    with open(tcsv, "wb") as f:
        p = subprocess.run([DILATTN, "tune", args[0], "--seq-len", "32", "--reps", "1", "-o", "/proc/self/fd/1",
                            "--db", os.path.join(d, "t.jsonl"), "--backend", "host"], stdout=f, stderr=subprocess.PIPE)
    text = open(tcsv).read()
    check(p.returncode == 0 and text.startswith("config,backend,") and '"speedup"' not in text
          and b'"speedup"' in p.stderr, f"tune -o stdout: exit {p.returncode}, stdout {text[:60]!r}: {p.stderr[-200:]}")
    # an output naming an input: refused, the input as it was
    q2 = os.path.join(d, "q2.npy")
    shutil.copy(args[2], q2)
    before = open(q2, "rb").read()
    a2 = list(args)
    a2[2] = q2
    for flags in (("-o", q2), ("-o", os.path.join(d, "o.npy"), "--lse", q2), ("-o", args[0])):
        rc, so, err = run("run", *a2, *flags)
        check(rc == 2 and "may not replace an input" in err and open(q2, "rb").read() == before,
              f"run {' '.join(flags)} (an input): exit {rc}: {err}")
    cfg = os.path.join(d, "cfg.json")
    shutil.copy(args[0], cfg)
    before = open(cfg, "rb").read()
    rc, so, err = run("tune", cfg, "--seq-len", "32", "--reps", "1", "-o", cfg, "--db", os.path.join(d, "db.jsonl"))
    check(rc == 2 and "may not replace an input" in err and open(cfg, "rb").read() == before,
          f"tune -o <its config>: exit {rc}: {err}")
    # a name of NAME_MAX - 11 bytes and more (up to NAME_MAX)
    for n in (244, 255):
        name = os.path.join(d, "y" * (n - 4) + ".npy")
        rc, so, err = run("run", *args, "-o", name)
        check(rc == 0 and np.load(name).ndim == 4, f"run -o <a {n}-byte name>: exit {rc}: {err}")
    check(not [f for f in os.listdir(d) if ".tmp" in f], f"temp files left: {os.listdir(d)}")


def test_stale_build_folders(tmp):
    """A process killed mid-compile leaves its $TMPDIR/dilattn-build-XXXXXX (hundreds piled
    up in /tmp: helper-55); the first compile of a later process removes this user's that
    are a day old and hold only a build's files, and nothing else."""
    td = os.path.join(tmp, "tmpdir")
    os.mkdir(td)
    old = time.time() - 2 * 86400
    made = {}
    for name, files, age in (("dilattn-build-OLD123", ("kernel.c", "compile.log"), old),
                             ("dilattn-build-NEW123", ("kernel.c",), None),
                             ("dilattn-build-MIN123", ("kernel.c", "mine.txt"), old),
                             ("other-build-OLD1234", ("kernel.c",), old)):
        p = os.path.join(td, name)
        os.mkdir(p)
        for f in files:
            open(os.path.join(p, f), "w").write("x")
        if age:
            os.utime(p, (age, age))
        made[name] = p
    rc, so, err = run("run", *golden_run_args(), "-o", os.path.join(tmp, "stale_o.npy"),
                      env={"TMPDIR": td, "DILATTN_CACHE_DIR": os.path.join(tmp, "stale-cache")})
    left = sorted(os.listdir(td))
    check(rc == 0 and left == ["dilattn-build-MIN123", "dilattn-build-NEW123", "other-build-OLD1234"],
          f"stale build folders after a compile: exit {rc}, left {left}: {err[-200:]}")
    kept = sorted(os.listdir(made["dilattn-build-MIN123"]))
    check(kept == ["kernel.c", "mine.txt"], f"a stale folder holding a file of the user's lost files: {kept}")


def test_json_escaped(tmp):
    """Paths printed into the JSON summaries are escaped: quotes, backslashes, control
    characters, and long paths are not cut."""
    d = os.path.join(tmp, 'q"uo\\te\tdir')
    os.mkdir(d)
    out, lse = os.path.join(d, 'a"b\\c.npy'), os.path.join(d, "l\nx.npy")
    rc, so, err = run("run", *golden_run_args(), "-o", out, "--lse", lse)
    try:
        summary = json.loads(so)
        check(rc == 0 and summary["out"] == out and summary["lse"] == lse, f"run summary paths: {summary}")
    except ValueError as ex:
        check(False, f"run printed invalid JSON for -o {out!r}: {ex}: {so!r} {err}")
    # a path that is not UTF-8 (a Latin-1 byte): the JSON stays UTF-8, the byte as U+FFFD
    latin = os.fsencode(d) + b"/a\xffb.npy"
    p = subprocess.run([DILATTN, "run", *golden_run_args(), "-o", latin], capture_output=True)
    try:
        summary = json.loads(p.stdout.decode("utf-8"))
        check(p.returncode == 0 and summary["out"] == d + "/a\ufffdb.npy" and os.path.exists(latin),
              f"run -o <a Latin-1 path>: {summary}")
    except ValueError as ex:
        check(False, f"run printed invalid UTF-8 JSON for a Latin-1 path: {ex}: {p.stdout!r}")
    rc, so, err = run("gen", os.path.join(GOLDEN, "gqa_4_to_1", "case.json"), "-o", d, "--report")
    try:
        rep = json.loads(so)
        check(rc == 0 and rep["source"].startswith(d + "/"), f"gen --report source: {rep}")
    except ValueError as ex:
        check(False, f"gen --report printed invalid JSON for -o {d!r}: {ex}: {so!r} {err}")
    # a long path (over a thousand bytes) comes back whole
    deep = tmp
    for i in range(12):
        deep = os.path.join(deep, "d" * 100 + str(i))
    os.makedirs(deep)
    out = os.path.join(deep, "o.npy")
    rc, so, err = run("run", *golden_run_args(), "-o", out)
    check(rc == 0 and json.loads(so)["out"] == out, f"run with a {len(out)}-byte path: exit {rc}: {so[-200:]} {err}")
    rc, so, err = run("info", env={"DILATTN_TEMPLATE_DIR": deep + '/"'})
    check(rc == 0 and json.loads(so)["template_dir"] == deep + '/"', f"info, a long template dir: {so[-200:]}")


def test_stdout_errors(tmp):
    """A write error on stdout (here /dev/full) is an error: exit 2 with a message, not 0."""
    if not os.path.exists("/dev/full"):
        print("no /dev/full: stdout error checks skipped")
        return
    d = os.path.join(tmp, "full")
    os.mkdir(d)
    cfg = os.path.join(GOLDEN, "gqa_4_to_1", "case.json")
    for args in (("run", *golden_run_args(), "-o", os.path.join(d, "x.npy")), ("gen", cfg, "-o", d),
                 ("gen", cfg, "-o", d, "--report"), ("info",), ("cache", "stats"), ("--version",), ("--help",)):
        rc, err = run_to_full(*args)
        check(rc == 2 and "standard output" in err, f"{' '.join(args[:2])} >/dev/full: exit {rc}: {err}")


def test_gen_checks_first(tmp):
    """gen refuses before writing anything: a config the path does not serve after one it
    does, --arch items that are not sm_NN or sm_NNa, and bundle entry points that would
    clash (two configs giving one identifier)."""
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "example", "longnet.json")
    f32 = os.path.join(tmp, "f32.json")
    json.dump(dict(json.load(open(example)), dtype="float32"), open(f32, "w"))
    d = os.path.join(tmp, "gen-first")
    os.mkdir(d)

    def empty():
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))

    rc, so, err = run("gen", example, f32, "--target", "cuda", "--mma", "wgmma", "-o", d)
    check(rc == 2 and "f32.json" in err and not so and not os.listdir(d),
          f"gen of a served config then an unserved one: exit {rc}, wrote {os.listdir(d)}, printed {so!r}: {err}")
    empty()
    for arch in ("sm_80,", ",sm_80", "sm_80,,sm_90", "sm_8a", "sm_", "sm_80b", "compute_80", "sm_90aa", "SM_80", " sm_80",
                 "sm_80a", "sm_86a", "sm_00080", "sm_080"):
        rc, so, err = run("gen", example, "--target", "cuda", "--arch", arch, "-o", d)
        check(rc == 2 and "--arch" in err and not os.listdir(d), f"gen --arch {arch!r}: exit {rc}: {err}")
        empty()
    for arch in ("sm_80", "sm_90a", "sm_80,sm_90", "sm_100,sm_120a"):
        rc, so, err = run("gen", example, "--target", "cuda", "--arch", arch, "-o", d)
        check(rc == 0, f"gen --arch {arch!r}: exit {rc}: {err}")
        empty()
    # bundle identifiers: the config's file name up to its first '.'; a clash is refused
    cfg = os.path.join(GOLDEN, "gqa_4_to_1", "case.json")
    for names in (("x/cfg.json", "y/cfg.json"), ("model.v1.json", "model.v2.json"), ("a-b.json", "a_b.json")):
        paths = []
        for n in names:
            p = os.path.join(tmp, "bn", n)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            shutil.copy(cfg, p)
            paths.append(p)
        rc, so, err = run("gen", *paths, "--bundle", "nm", "-o", d)
        check(rc == 2 and paths[0] in err and paths[1] in err and "nm_" in err and not os.listdir(d) and not so,
              f"gen --bundle {names}: exit {rc}, wrote {os.listdir(d)}: {err}")
        empty()
    # distinct identifiers: one entry point each
    a, b = os.path.join(tmp, "bn", "one.json"), os.path.join(tmp, "bn", "two.v1.json")
    shutil.copy(cfg, a)
    shutil.copy(cfg, b)
    rc, so, err = run("gen", a, b, "--bundle", "nm", "-o", d)
    header = open(os.path.join(d, "nm.h")).read() if rc == 0 else ""
    check(rc == 0 and header.count("nm_one_spec(da_spec *s)") == 1 and header.count("nm_two_spec(da_spec *s)") == 1,
          f"gen --bundle of two configs: exit {rc}: {err}")
    # --bundle compiles (a bundle without its kernels fails every DILATTN_DISABLE_JIT program)
    man = json.load(open(os.path.join(d, "manifest.json"))) if rc == 0 else {}
    arts = [a for c in man.get("kernels", []) for a in c.get("artifacts", [])]
    # (the two configs' one kernel: an artifact each in the manifest, its file named once)
    check(len(arts) == 2 and all(a.get("arch") == "host" for a in arts) and so.count(".host.so") == 1,
          f"gen --bundle without --compile: artifacts {arts}, printed {so}")
    # a bundle is written whole or not at all: with nm2.h a folder, the manifest there stays
    d2 = os.path.join(tmp, "bn2")
    os.makedirs(os.path.join(d2, "nm2.h"))
    open(os.path.join(d2, "manifest.json"), "w").write("keep\n")
    rc, so, err = run("gen", a, "--bundle", "nm2", "-o", d2)
    check(rc == 2 and open(os.path.join(d2, "manifest.json")).read() == "keep\n"
          and not os.path.exists(os.path.join(d2, "nm2_bundle.c")) and not [f for f in os.listdir(d2) if ".tmp" in f],
          f"gen --bundle with its header path a folder: exit {rc}, {sorted(os.listdir(d2))}: {err}")
    # an output that is a config (manifest.json, NAME.h, a kernel's source) is refused
    # before anything is written; so is another bundle's manifest.json in -o (its kernels
    # were lost from DILATTN_BUNDLES=DIR/manifest.json); the same bundle's is rewritten
    d3 = os.path.join(tmp, "bn3")
    os.mkdir(d3)
    cfg_src = open(cfg).read()
    src = [f for f in os.listdir(d) if f.endswith(".c") and f.startswith("da_fwd_")]
    for name, flags in (("manifest.json", ["--bundle", "b3"]), ("b3.h", ["--bundle", "b3"]),
                        ("b3_bundle.c", ["--bundle", "b3"]), (src[0] if src else "none.c", [])):
        for f in os.listdir(d3):
            os.unlink(os.path.join(d3, f))
        p = os.path.join(d3, name)
        open(p, "w").write(cfg_src)
        rc, so, err = run("gen", p, *flags, "-o", d3)
        check(rc == 2 and "may not replace an input" in err and os.listdir(d3) == [name] and open(p).read() == cfg_src,
              f"gen with config {name} in -o: exit {rc}, {sorted(os.listdir(d3))}: {err}")
    for f in os.listdir(d3):
        os.unlink(os.path.join(d3, f))
    rc1, _, err1 = run("gen", a, "--bundle", "first", "-o", d3)
    rc2, _, err2 = run("gen", b, "--bundle", "second", "-o", d3)
    rc3, _, err3 = run("gen", a, "--bundle", "first", "-o", d3)
    man = json.load(open(os.path.join(d3, "manifest.json")))
    check(rc1 == 0 and rc2 == 2 and "bundle first's" in err2 and rc3 == 0 and man.get("name") == "first"
          and not os.path.exists(os.path.join(d3, "second.h")),
          f"gen --bundle second into first's folder: exits {rc1} {rc2} {rc3}, {man.get('name')}: {err1}{err2}{err3}")


def test_gen_refusals(tmp):
    """gen's refused options (exit 2, the problem named, nothing written): an unknown option,
    more than 256 configs, a --target that is not host or cuda, a --bundle name that is not
    a C identifier of at most 64 characters, --arch with the host target, an empty --arch."""
    cfg = os.path.join(GOLDEN, "gqa_4_to_1", "case.json")
    d = os.path.join(tmp, "gen-refusals")
    os.mkdir(d)
    cases = [
        (["--bogus"], "gen: unknown option --bogus"),
        ([cfg] * 256, "more than 256 configs"),
        (["--target", "gpu"], "--target: 'gpu' is not host or cuda"),
        (["--bundle", "9bad"], "must be a C identifier"),
        (["--bundle", "b" * 65], "must be a C identifier"),
        (["--bundle", "a-b"], "must be a C identifier"),
        (["--target", "host", "--arch", "sm_80"], "the host target has no arch"),
        (["--target", "cuda", "--arch", ""], "--arch ''"),
        (["--threads", "x"], "--threads 'x'"),
        (["-o"], "-o needs a value"),
        # an option given twice (the last was taken in silence)
        (["--target", "cuda", "--target", "host"], "gen: --target given twice (cuda and host)"),
        (["--target", "cuda", "--arch", "sm_80", "--arch", "sm_90"], "gen: --arch given twice (sm_80 and sm_90)"),
        (["--bundle", "a", "--bundle", "b"], "gen: --bundle given twice (a and b)"),
        (["--target", "cuda", "--mma", "sync", "--mma", "wgmma"], "gen: --mma given twice (sync and wgmma)"),
        (["--threads", "1", "--threads", "2"], "gen: --threads given twice (1 and 2)"),
        (["-o", "elsewhere"], "gen: -o given twice (elsewhere and "),
    ]
    for extra, want in cases:
        rc, so, err = run("gen", cfg, *extra, *(["-o", d] if extra != ["-o"] else []))
        check(rc == 2 and want in err and not os.listdir(d) and not so,
              f"gen {' '.join(extra)[:60]}: exit {rc}, wrote {os.listdir(d)}: {err}")


def test_gen_compile_all_or_nothing(tmp):
    """gen --compile / --report compiles every (config, arch) before writing any file, in
    parallel threads (--threads): a compile failing part-way leaves nothing written, and
    the error names the first failing config as one thread would. Templates copied with a
    planted #error for configs without a causal mask make the second config fail."""
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "example", "longnet.json")
    full = os.path.join(tmp, "full.json")
    json.dump(dict(json.load(open(example)), causal=False), open(full, "w"))
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "templates")
    bad = os.path.join(tmp, "planted", "templates")
    shutil.copytree(src, bad)
    for name in ("cuda/kernel.cu.tpl", "host/kernel.c.tpl"):
        with open(os.path.join(bad, name), "a") as f:
            f.write("{% if not p.causal then %}\n#error planted compile failure\n{% end %}\n")
    d = os.path.join(tmp, "gen-all")
    os.mkdir(d)
    for target, extra in (("cuda", ["--arch", "sm_80,sm_90"]), ("host", [])):
        for mode in ("--compile", "--report"):
            for threads in (["--threads", "1"], []):
                args = ["gen", example, full, "--target", target, *extra, mode, *threads, "-o", d]
                rc, so, err = run(*args, env={"DILATTN_TEMPLATE_DIR": bad})
                check(rc == 3 and "full.json" in err and "planted compile failure" in err and not os.listdir(d)
                      and not so, f"{' '.join(args[1:])} with a failing second config: exit {rc}, "
                      f"wrote {os.listdir(d)}, printed {so!r}: {err[-300:]}")
        # without the planted failure: every file, in config order, whatever the threads
        outs = []
        for threads in ("1", "2"):
            rc, so, err = run("gen", example, full, "--target", target, *extra, "--compile", "--threads", threads, "-o", d)
            outs.append(so)
            check(rc == 0 and len(so.split()) == (4 if target == "cuda" else 2), f"gen {target} --compile: exit {rc}: {err}")
            for f in os.listdir(d):
                os.unlink(os.path.join(d, f))
        check(outs[0] == outs[1], f"gen {target} --compile prints the same lines with 1 and 2 threads: {outs}")
    for bad_threads in ("-1", "x", "", "2000"):
        rc, _, err = run("gen", example, "--threads", bad_threads, "-o", d)
        check(rc == 2 and "--threads" in err, f"gen --threads {bad_threads!r}: exit {rc}: {err}")


def test_gen_writes_all_or_nothing(tmp):
    """gen puts its outputs in place together or not at all: where a later output cannot be
    written (a folder in its place, the file size limit past the bundle's data), the files
    an earlier gen wrote there stay as they were, nothing is printed and no temp file is
    left. It had replaced the sources and kernels before failing on the bundle."""
    import resource
    cfg = os.path.join(GOLDEN, "gqa_4_to_1", "case.json")
    d = os.path.join(tmp, "gen-writes")
    os.mkdir(d)
    rc, so, err = run("gen", cfg, "--bundle", "wb", "-o", d)
    check(rc == 0, f"gen --bundle: exit {rc}: {err}")
    names = sorted(os.listdir(d))
    old = {n: b"old " + n.encode() for n in names}
    sizes = {n: os.path.getsize(os.path.join(d, n)) for n in names}

    def reset():
        for n in os.listdir(d):
            p = os.path.join(d, n)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        for n in names:
            open(os.path.join(d, n), "wb").write(old[n])

    def as_before(what, rc, so, err, skip=()):
        left = {n: open(os.path.join(d, n), "rb").read() for n in names if n not in skip}
        check(rc == 2 and not so and left == {n: old[n] for n in left}
              and sorted(os.listdir(d)) == names and not [n for n in os.listdir(d) if ".tmp" in n],
              f"gen with {what}: exit {rc}, printed {so!r}, {sorted(os.listdir(d))}, "
              f"changed {[n for n in left if left[n] != old[n]]}: {err}")

    for last in ("wb_bundle.c", [n for n in names if n.endswith(".host.so")][0], "wb.h"):
        reset()
        os.unlink(os.path.join(d, last))
        os.mkdir(os.path.join(d, last))
        rc, so, err = run("gen", cfg, "--bundle", "wb", "-o", d)
        check(last in err, f"gen with {last} a folder names it: {err}")
        os.rmdir(os.path.join(d, last))
        open(os.path.join(d, last), "wb").write(old[last])
        as_before(f"{last} a folder", rc, so, err)
    # a FIFO with no reader in a source's place: refused before any file is replaced (it was
    # opened after the others were in place); with a reader it gets the source
    reset()
    src_name = [n for n in names if n.endswith(".c") and n.startswith("da_fwd_")][0]
    os.unlink(os.path.join(d, src_name))
    os.mkfifo(os.path.join(d, src_name))
    rc, so, err = run("gen", cfg, "--bundle", "wb", "-o", d)
    check("FIFO" in err, f"gen with a FIFO without a reader names it: {err}")
    os.unlink(os.path.join(d, src_name))
    open(os.path.join(d, src_name), "wb").write(old[src_name])
    as_before("a FIFO without a reader in a source's place", rc, so, err)
    reset()
    os.unlink(os.path.join(d, src_name))
    os.mkfifo(os.path.join(d, src_name))
    reader = subprocess.Popen(["cat", os.path.join(d, src_name)], stdout=subprocess.PIPE)
    rc, so, err = run("gen", cfg, "--bundle", "wb", "-o", d)
    got = reader.communicate(timeout=60)[0]
    check(rc == 0 and b"da_fwd_" in got and stat.S_ISFIFO(os.lstat(os.path.join(d, src_name)).st_mode)
          and open(os.path.join(d, "wb.h"), "rb").read() != old["wb.h"],
          f"gen with a read FIFO in a source's place: exit {rc}, {len(got)} bytes read: {err}")
    os.unlink(os.path.join(d, src_name))
    # the bundle's data (every kernel's bytes as text) is the largest file: a size limit
    # past the others fails it last, after the sources and kernels are written
    reset()
    limit = max(v for n, v in sizes.items() if n != "wb_bundle.c") + 1
    check(sizes["wb_bundle.c"] > limit, f"the bundle's data is the largest output: {sizes}")
    p = subprocess.run([DILATTN, "gen", cfg, "--bundle", "wb", "-o", d], capture_output=True, text=True,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    as_before(f"a file size limit of {limit} bytes", p.returncode, p.stdout, p.stderr)
    # and the sources without --compile: one unwritable output, none replaced
    reset()
    rc, so, err = run("gen", cfg, "--target", "cuda", "--arch", "sm_80", "--compile", "-o", d)
    check(rc == 0, f"gen --target cuda --compile: exit {rc}: {err}")
    cu = sorted(n for n in os.listdir(d) if n not in names)
    for n in cu:
        open(os.path.join(d, n), "wb").write(b"old")
    cubin = [n for n in cu if n.endswith(".cubin")][0]
    os.unlink(os.path.join(d, cubin))
    os.mkdir(os.path.join(d, cubin))
    rc, so, err = run("gen", cfg, "--target", "cuda", "--arch", "sm_80", "--compile", "-o", d)
    check(rc == 2 and not so and all(open(os.path.join(d, n), "rb").read() == b"old" for n in cu if n != cubin),
          f"gen --target cuda with {cubin} a folder: exit {rc}, printed {so!r}: {err}")
    os.rmdir(os.path.join(d, cubin))


def test_readme_example(tmp):
    """README's worked example prints the fields `run` prints, in its order (it had gone
    stale: four fields were missing)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    readme = open(os.path.join(root, "README.md")).read()
    shown = [ln for ln in readme.split("## Worked example", 1)[-1].splitlines() if ln.startswith('{"kernel":')][:1]
    ex = os.path.join(root, "tests", "data", "example")
    rc, so, err = run("run", os.path.join(ex, "longnet.json"), "--q", os.path.join(ex, "q.npy"), "--k",
                      os.path.join(ex, "k.npy"), "--v", os.path.join(ex, "v.npy"), "-o", os.path.join(tmp, "ex-out.npy"),
                      "--lse", os.path.join(tmp, "ex-lse.npy"))
    got = json.loads(so) if rc == 0 else {}
    want = json.loads(shown[0]) if shown else {}
    check(rc == 0 and list(got) == list(want) and all(got[k] == want[k] for k in want if k not in
                                                      ("execute_ms", "plan_ms", "kernel_from", "out", "lse")),
          f"README's worked example: {shown} against {so!r}: {err}")


def test_fake_device(tmp):
    """The CUDA path of the CLI on the fake driver (tests/fake_cuda.c: an sm_90 device that
    runs nothing, its memory the host's): info names it and its default instruction; run --backend cuda copies the
    inputs in and out and writes out / lse of the right shapes (zeros: no kernel ran);
    tune --backend cuda compiles every candidate and, none correct, exits 4."""
    if not FAKE_CUDA:
        print("skip: no fake driver given")
        return
    env = {"DILATTN_CUDA_LIB": FAKE_CUDA, "DILATTN_CACHE_DIR": os.path.join(tmp, "fake-cache"),
           "FAKE_CUDA_LOG": os.path.join(tmp, "fake.log"), "DILATTN_TUNING": "0"}
    rc, so, err = run("info", env=env)
    info = json.loads(so) if rc == 0 else {}
    cuda = info.get("backends", {}).get("cuda", {})
    check(cuda.get("available") and cuda.get("arch") == "sm_90" and "Fake GPU" in cuda.get("device", "")
          and cuda.get("default_mma") == "wgmma-ws-tma" and cuda.get("tma") is True,
          f"info on the fake device: exit {rc}: {so} {err}")
    # the default instruction under a CUDA 12.0 driver (kernel parameters stop at 4 KiB), on
    # sm_80, and the encoder's absence under DILATTN_TMA=0
    for extra, want, tma in (({"FAKE_CUDA_VERSION": "12000"}, "wgmma-ws", True), ({"FAKE_CUDA_CC": "80"}, "sync", False),
                             ({"DILATTN_TMA": "0"}, "wgmma-ws-tma", False)):
        rc, so, err = run("info", env={**env, **extra})
        cuda = json.loads(so).get("backends", {}).get("cuda", {}) if rc == 0 else {}
        check(cuda.get("default_mma") == want and cuda.get("tma") is tma, f"info, {extra}: exit {rc}: {so} {err}")
    d = os.path.join(tmp, "fake-run")
    os.mkdir(d)
    out, lse = os.path.join(d, "o.npy"), os.path.join(d, "l.npy")
    args = golden_run_args()[:-2]  # (its --backend host)
    rc, so, err = run("run", *args, "-o", out, "--lse", lse, "--backend", "cuda", env=env)
    q = np.load(args[args.index("--q") + 1])
    launches = open(env["FAKE_CUDA_LOG"]).read() if os.path.exists(env["FAKE_CUDA_LOG"]) else ""
    check(rc == 0 and json.loads(so)["backend"] == "cuda" and np.load(out).shape == q.shape
          and np.load(lse).shape == (q.shape[0], q.shape[2], q.shape[1]) and "launch da_fwd_" in launches,
          f"run --backend cuda on the fake device: exit {rc}: {so} {err} {launches}")
    # an AOT bundle of the sm_90 default (wgmma-ws-tma) serves a plain run with JIT off: the
    # default finds the bundle's kernel and launches it with its tensor maps
    g = os.path.join(GOLDEN, "half_inputs")
    db = os.path.join(tmp, "fake-tma-bundle")
    os.mkdir(db)
    rc, so, err = run("gen", os.path.join(g, "case.json"), "--target", "cuda", "--mma", "wgmma-ws-tma", "--compile",
                      "--bundle", "tmab", "-o", db)
    check(rc == 0, f"gen --mma wgmma-ws-tma --bundle: exit {rc}: {err}")
    log = os.path.join(tmp, "fake-tma.log")
    env2 = dict(env, DILATTN_BUNDLES=os.path.join(db, "manifest.json"), DILATTN_DISABLE_JIT="1", FAKE_CUDA_LOG=log,
                DILATTN_CACHE_DIR=os.path.join(tmp, "fake-cache-empty"))
    rc, so, err = run("run", os.path.join(g, "case.json"), "--q", os.path.join(g, "q.npy"), "--k", os.path.join(g, "k.npy"),
                      "--v", os.path.join(g, "v.npy"), "-o", os.path.join(d, "o16.npy"), "--backend", "cuda", env=env2)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    launches = [x for x in lines if x.startswith("launch ")]
    check(rc == 0 and json.loads(so)["cuda_mma"] == 6 and launches and all("_wgmmat" in x and " tma 1" in x for x in launches)
          and any(x.startswith("tmap ") for x in lines),
          f"run with JIT off and the TMA bundle on the fake device: exit {rc}: {so} {err} {lines[:4]}")
    csv = os.path.join(d, "t.csv")
    rc, so, err = run("tune", args[0], "--seq-len", "256", "--backend", "cuda", "--reps", "1", "-o", csv,
                      "--db", os.path.join(d, "db.jsonl"), env=env)
    rows = open(csv).read().splitlines()[1:] if os.path.exists(csv) else []
    check(rc == 4 and rows and all(",correctness," in r for r in rows),
          f"tune --backend cuda on the fake device (no kernel runs): exit {rc}, {len(rows)} rows: {err[-300:]}")


def test_gen_auto(tmp):
    """gen --mma auto: per arch the kernel a plan naming no instruction takes on such a
    device, and on sm_90 its fallback (wgmma-ws-tma and wgmma-ws; wgmma-ws alone under a
    sparse layout; mma.sync where the wgmma paths do not serve the config and on every other
    arch), so one bundle serves the default plan with JIT off on an sm_80 device, an sm_90
    one, and an sm_90 one whose driver predates CUDA 12.1. Its typed _plan names no
    instruction; its entry points come once a config."""
    d = os.path.join(tmp, "auto")
    os.mkdir(d)
    base = dict(segment_lengths=[128, 256], dilation_rates=[1, 2], num_heads=2, head_dim=64, dtype="float16", causal=True)
    cfgs = {"ln2": base, "f32": dict(base, dtype="float32", head_dim=32),
            "sparse": dict(base, sparsity=dict(layout="local_window", block=64, window=1))}
    paths = []
    for name, c in cfgs.items():
        paths.append(os.path.join(tmp, name + ".json"))
        json.dump(c, open(paths[-1], "w"))
    rc, out, err = run("gen", *paths, "--target", "cuda", "--mma", "auto", "--report", "--bundle", "autob", "-o", d)
    if rc == 4 and "nvrtc" in err.lower():
        print("gen --mma auto: NVRTC not available, skipped")
        return
    reps = [json.loads(x) for x in out.splitlines() if x.startswith("{")] if rc == 0 else []
    got = [(r["kernel"].split("_")[-1] if r["kernel"].endswith(("_wgmmat", "_wgmmaw")) else "sync", r["arch"], r["mma"])
           for r in reps]
    want = [("sync", "sm_80", "sync"), ("wgmmat", "sm_90a", "wgmma-ws-tma"), ("wgmmaw", "sm_90a", "wgmma-ws"),
            ("sync", "sm_80", "sync"), ("sync", "sm_90", "sync"),
            ("sync", "sm_80", "sync"), ("wgmmaw", "sm_90a", "wgmma-ws")]
    check(rc == 0 and got == want and all(r["spill_bytes"] == 0 for r in reps),
          f"gen --mma auto: exit {rc}: {got} {err[-300:]}")
    header = open(os.path.join(d, "autob.h")).read() if rc == 0 else ""
    manifest = json.load(open(os.path.join(d, "manifest.json"))) if rc == 0 else {}
    check(all(header.count(f"autob_{n}_plan(") == 1 and header.count(f"autob_{n}_run(") == 1 for n in cfgs)
          and "cuda_mma" not in header and len(manifest.get("kernels", [])) == 6,
          f"gen --mma auto --bundle: entry points once a config, no instruction named, 6 kernels: "
          f"{[k['kernel'] for k in manifest.get('kernels', [])]}")
    # host target and bad values: refused as before
    rc, _, err = run("gen", paths[0], "--mma", "auto", "-o", d)
    check(rc == 2 and "cuda target" in err, f"gen --mma auto, host target: exit {rc}: {err}")
    # lines in config order, then arch order: an arch after sm_90 prints after sm_90's kernels
    d2 = os.path.join(tmp, "auto-order")
    os.mkdir(d2)
    rc, out, err = run("gen", paths[2], "--target", "cuda", "--mma", "auto", "--arch", "sm_80,sm_90,sm_86", "--compile",
                       "-o", d2)
    got = [x.rsplit(".", 2)[-2] for x in out.split()]
    check(rc == 0 and got == ["sm_80", "sm_90a", "sm_86"], f"gen --mma auto --arch sm_80,sm_90,sm_86: exit {rc}, "
          f"arches in the order {got}: {err[-300:]}")
    # a config whose wgmma-ws-tma plan is wgmma-ws's kernel (a dilation past the tensor maps:
    # r = 64, 3 x 64 maps > 96): that kernel compiled and bundled once (it was twice)
    wide = os.path.join(tmp, "wide_r.json")
    json.dump(dict(segment_lengths=[128], dilation_rates=[64], num_heads=1, head_dim=64, dtype="float16"), open(wide, "w"))
    d3 = os.path.join(tmp, "auto-wide")
    os.mkdir(d3)
    rc, out, err = run("gen", wide, "--target", "cuda", "--mma", "auto", "--report", "--bundle", "wb", "-o", d3)
    kernels = [k["kernel"] for k in json.load(open(os.path.join(d3, "manifest.json")))["kernels"]] if rc == 0 else []
    lines = [x for x in out.splitlines() if x.startswith("{")]
    check(rc == 0 and len(kernels) == len(set(kernels)) == 2 and len(lines) == 2,
          f"gen --mma auto, r = 64: each kernel once: exit {rc}, {kernels}, {len(lines)} reports: {err[-200:]}")
    # an arch named twice is compiled once (it was twice, with two artifacts of one key in a
    # bundle); a bad item is still named by its place in the list
    rc, out, err = run("gen", paths[1], "--target", "cuda", "--arch", "sm_80,sm_80", "--report", "-o", d2)
    check(rc == 0 and len([x for x in out.splitlines() if x.startswith("{")]) == 1,
          f"gen --arch sm_80,sm_80: exit {rc}, {len(out.splitlines())} lines: {err[-200:]}")
    rc, _, err = run("gen", paths[1], "--target", "cuda", "--arch", "sm_80,sm_80,sm_8x", "-o", d2)
    check(rc == 2 and "item 3 'sm_8x'" in err, f"gen --arch sm_80,sm_80,sm_8x: exit {rc}: {err}")
    if not FAKE_CUDA:
        return
    rng = np.random.default_rng(7)
    for name, c in cfgs.items():
        for t in "qkv":
            x = rng.standard_normal((1, 256, c["num_heads"], c["head_dim"]))
            np.save(os.path.join(d, f"{name}_{t}.npy"), x.astype(np.float16 if c["dtype"] == "float16" else np.float32))
    for extra, want in (({}, {"ln2": "_wgmmat", "f32": "", "sparse": "_wgmmaw"}),
                        ({"FAKE_CUDA_VERSION": "12000"}, {"ln2": "_wgmmaw", "f32": "", "sparse": "_wgmmaw"}),
                        ({"FAKE_CUDA_CC": "80"}, {"ln2": "", "f32": "", "sparse": ""})):
        for name, path in zip(cfgs, paths):
            log = os.path.join(tmp, "auto-fake.log")
            if os.path.exists(log):
                os.unlink(log)
            env = {"DILATTN_CUDA_LIB": FAKE_CUDA, "DILATTN_TUNING": "0", "DILATTN_DISABLE_JIT": "1",
                   "DILATTN_BUNDLES": os.path.join(d, "manifest.json"), "FAKE_CUDA_LOG": log,
                   "DILATTN_CACHE_DIR": os.path.join(tmp, "auto-cache-empty"), **extra}
            rc, so, err = run("run", path, *[a for t in "qkv" for a in (f"--{t}", os.path.join(d, f"{name}_{t}.npy"))],
                              "-o", os.path.join(d, "o.npy"), "--backend", "cuda", env=env)
            launches = [x.split()[1] for x in open(log).read().splitlines() if x.startswith("launch ")] \
                if os.path.exists(log) else []
            paths_run = {"_wgmmat" if "_wgmmat" in k else "_wgmmaw" if "_wgmmaw" in k else "" for k in launches}
            check(rc == 0 and launches and paths_run == {want[name]},
                  f"run {name} with JIT off and the auto bundle, {extra}: exit {rc}: {launches} {err[-300:]}")
    # --arch sm_90a (an H100 or H200 named so): a config the wgmma paths do not serve takes
    # mma.sync there, compiled for the sm_90 device's arch, or the bundle does not serve it
    d3 = os.path.join(tmp, "auto-90a")
    os.mkdir(d3)
    rc, _, err = run("gen", paths[1], "--target", "cuda", "--mma", "auto", "--arch", "sm_90a", "--bundle", "b90a", "-o", d3)
    env = {"DILATTN_CUDA_LIB": FAKE_CUDA, "DILATTN_TUNING": "0", "DILATTN_DISABLE_JIT": "1",
           "DILATTN_BUNDLES": os.path.join(d3, "manifest.json"), "DILATTN_CACHE_DIR": os.path.join(tmp, "auto-cache-empty")}
    rc2, _, err2 = run("run", paths[1], *[a for t in "qkv" for a in (f"--{t}", os.path.join(d, f"f32_{t}.npy"))],
                       "-o", os.path.join(d3, "o.npy"), "--backend", "cuda", env=env) if rc == 0 else (rc, "", err)
    check(rc2 == 0, f"gen --mma auto --arch sm_90a: a float32 config's default plan on an sm_90 device with JIT off: "
          f"exit {rc2}: {err2[-300:]}")


def test_cache(tmp):
    """cache list: one object per entry, each with its key; cache clear: what it removed
    and what is left, unambiguous; a cache folder that cannot be used is an error (exit 4);
    info: the folder the cache actually uses."""
    cd = os.path.join(tmp, "kcache")
    env = {"DILATTN_CACHE_DIR": cd}
    rc, so, err = run("run", *golden_run_args(), "-o", os.path.join(tmp, "cache_o.npy"),
                      env={**env, "DILATTN_LOG_LEVEL": "info"})
    first = json.loads(so) if rc == 0 else {}
    # the summary and the info line say the kernel was compiled (and where it is kept), how long
    check(rc == 0 and first.get("kernel_from") == "compiled" and first.get("plan_ms", 0) > 0
          and f"kernel {first.get('kernel')} for host: compiled in " in err and f"kept in the disk cache as {cd}" in err,
          f"run into a fresh cache: exit {rc}: {so} {err}")
    # the second run takes it from the disk cache: no info line, a debug one
    rc, so, err = run("run", *golden_run_args(), "-o", os.path.join(tmp, "cache_o.npy"),
                      env={**env, "DILATTN_LOG_LEVEL": "info"})
    again = json.loads(so) if rc == 0 else {}
    check(rc == 0 and again.get("kernel_from") == "disk_cache" and "compiled" not in err,
          f"run from the disk cache: exit {rc}: {so} {err}")
    rc, so, err = run("run", *golden_run_args(), "-o", os.path.join(tmp, "cache_o.npy"),
                      env={**env, "DILATTN_LOG_LEVEL": "debug"})
    check(rc == 0 and f"for host: from the disk cache ({cd}" in err, f"run from the disk cache at debug: {err}")
    rc, so, err = run("cache", "stats", env=env)
    stats = json.loads(so) if rc == 0 else {}
    check(rc == 0 and stats.get("entries", 0) >= 1 and stats.get("bytes", 0) > 0, f"cache stats: {rc} {so} {err}")
    rc, so, err = run("cache", "list", env=env)
    entries = [json.loads(x) for x in so.splitlines()] if rc == 0 else []
    check(rc == 0 and len(entries) == stats.get("entries") and all("key" in e and "arch" in e for e in entries),
          f"cache list: one object per entry, each with a key: {so}")
    # an entry's .json damaged ({}), or pretty-printed over lines: still one valid line each,
    # the key its file's name (it printed "{,"disk_bytes"..." and lines that do not parse)
    jsons = sorted(glob.glob(os.path.join(cd, "v1", "*", "*", "*.json")))
    if jsons:
        saved = open(jsons[0]).read()
        for text in ("{}", json.dumps(json.loads(saved), indent=2)):
            open(jsons[0], "w").write(text)
            rc, so, err = run("cache", "list", env=env)
            try:
                listed = [json.loads(x) for x in so.splitlines()]
            except ValueError:
                listed = []
            key = os.path.basename(jsons[0])[:-5]
            check(rc == 0 and len(listed) == stats.get("entries") and any(e.get("key") == key for e in listed),
                  f"cache list with an entry's .json {text[:20]!r}...: {so}")
        open(jsons[0], "w").write(saved)
    # verify: a corrupt entry it cannot remove (its .bin a folder holding a file) is said and
    # fails the command (it was counted as removed, exit 0); that folder gone, verify is clean
    bins = glob.glob(os.path.join(cd, "v1", "*", "*", "*.bin"))
    check(bins, f"no .bin in the cache {cd}")
    if bins:
        os.unlink(bins[0])
        os.mkdir(bins[0])
        open(os.path.join(bins[0], "x"), "w").write("x")
        rc, so, err = run("cache", "verify", env=env)
        ver = json.loads(so) if so.strip() else {}
        check(rc == 4 and ver.get("corrupt") == 1 and ver.get("removed") == 0 and "could not be removed" in err,
              f"cache verify of an entry it cannot remove: exit {rc}: {so} {err}")
        shutil.rmtree(bins[0])
        rc, so, err = run("cache", "verify", env=env)
        ver = json.loads(so) if rc == 0 else {}
        check(rc == 0 and ver.get("corrupt") == 0, f"cache verify, the folder removed: {rc} {so} {err}")
        rc, so, err = run("run", *golden_run_args(), "-o", os.path.join(tmp, "cache_o.npy"), env=env)
        rc, so, err = run("cache", "stats", env=env)
        stats = json.loads(so) if rc == 0 else {}
    rc, so, err = run("cache", "clear", env=env)
    cleared = json.loads(so) if rc == 0 else {}
    check(rc == 0 and cleared.get("removed") == stats.get("entries") and cleared.get("removed_bytes") == stats.get("bytes")
          and cleared.get("entries") == 0 and cleared.get("bytes") == 0, f"cache clear after {stats}: {so} {err}")
    rc, so, err = run("cache", "stats", env=env)
    check(rc == 0 and json.loads(so)["entries"] == 0, f"cache stats after clear: {so}")
    rc, so, err = run("cache", "list", env=env)
    check(rc == 0 and so == "", f"cache list of an empty cache prints nothing: {so!r}")
    # a cache folder whose name is past what the entries' paths allow (3900): memory-only,
    # said; nothing made under the name cut short (it had been, and filled)
    long_dir = tmp
    while len(long_dir) < 3950:
        long_dir = os.path.join(long_dir, "e" * min(200, 3950 - len(long_dir)))
    rc, so, err = run("run", *golden_run_args(), "-o", os.path.join(tmp, "cache_long.npy"), env={"DILATTN_CACHE_DIR": long_dir})
    check(rc == 0 and "past the 3900" in err and not os.path.exists(long_dir[:3900]),
          f"run with a {len(long_dir)}-character cache folder: exit {rc}: {err[-300:]}")
    rc, so, err = run("info", env={"DILATTN_CACHE_DIR": long_dir})
    inf = json.loads(so) if rc == 0 else {}
    check(inf.get("cache_dir") == long_dir and inf.get("cache_usable") is False, f"info, a too-long cache folder: {so[-200:]}")
    rc, so, err = run("cache", "stats", env={"DILATTN_CACHE_DIR": long_dir})
    check(rc == 4 and "too long" in err, f"cache stats, a too-long cache folder: exit {rc}: {err[-300:]}")
    # a regular file as the cache folder: every subcommand fails, saying why
    f = os.path.join(tmp, "cache-is-a-file")
    open(f, "w").write("x")
    for sub in ("stats", "list", "verify", "clear"):
        rc, so, err = run("cache", sub, env={"DILATTN_CACHE_DIR": f})
        check(rc == 4 and "cache-is-a-file" in err and "dilattn: error: " in err and not so,
              f"cache {sub} on a regular file: exit {rc}: {so} {err}")
    check(open(f).read() == "x", "the file in DILATTN_CACHE_DIR was modified")
    # info: the folder in use, however it was chosen
    xdg, home = os.path.join(tmp, "xdg"), os.path.join(tmp, "home")
    for e, want in (({"DILATTN_CACHE_DIR": cd}, cd),
                    ({"DILATTN_CACHE_DIR": "", "XDG_CACHE_HOME": xdg}, os.path.join(xdg, "dilattn")),
                    ({"DILATTN_CACHE_DIR": "", "XDG_CACHE_HOME": "", "HOME": home}, os.path.join(home, ".cache", "dilattn")),
                    # a relative XDG_CACHE_HOME is invalid (the XDG spec): HOME's, not a folder in the cwd
                    ({"DILATTN_CACHE_DIR": "", "XDG_CACHE_HOME": "rel/x", "HOME": home},
                     os.path.join(home, ".cache", "dilattn"))):
        rc, so, err = run("info", env=e)
        info = json.loads(so) if rc == 0 else {}
        check(rc == 0 and info.get("cache_dir") == want and info.get("cache_usable") is True,
              f"info with {e}: cache_dir {info.get('cache_dir')!r}, want {want!r}: {err}")
    rc, so, err = run("info", env={"DILATTN_CACHE_DIR": f})
    info = json.loads(so) if rc == 0 else {}
    check(rc == 0 and info.get("cache_dir") == f and info.get("cache_usable") is False, f"info, unusable cache: {so}")


def f32_to_bf16_bits(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_run_bf16(tmp):
    """bf16 (as <u2) against float32 on the same bf16-rounded values."""
    rng = np.random.default_rng(7)
    cfg = {"segment_lengths": [16, 32], "dilation_rates": [1, 2], "num_heads": 4, "num_kv_heads": 2,
           "head_dim": 16, "causal": True, "dtype": "bfloat16"}
    shape_q, shape_k = (2, 50, 4, 16), (2, 50, 2, 16)
    bits = {n: f32_to_bf16_bits(rng.uniform(-1, 1, s)) for n, s in (("q", shape_q), ("k", shape_k), ("v", shape_k))}
    for n, b in bits.items():
        np.save(os.path.join(tmp, f"bf_{n}.npy"), b)
        np.save(os.path.join(tmp, f"f32_{n}.npy"), (b.astype(np.uint32) << 16).view(np.float32))
    json.dump(cfg, open(os.path.join(tmp, "bf.json"), "w"))
    json.dump(dict(cfg, dtype="float32"), open(os.path.join(tmp, "f32.json"), "w"))
    for kind in ("bf", "f32"):
        rc, _, err = run("run", os.path.join(tmp, f"{kind}.json"), *sum(
            ([f"--{n}", os.path.join(tmp, f"{kind}_{n}.npy")] for n in "qkv"), []),
            "-o", os.path.join(tmp, f"{kind}_out.npy"))
        check(rc == 0, f"bf16 run ({kind}): exit {rc}: {err}")
    if failed:
        return
    got = np.load(os.path.join(tmp, "bf_out.npy"))
    check(got.dtype == np.uint16, f"bf16 out dtype {got.dtype}")
    ref = np.load(os.path.join(tmp, "f32_out.npy")).astype(np.float64)
    got_f = (got.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    check(np.abs(got_f - ref).max() <= 3e-2, "bf16 output differs from float32 on the same values")


def test_bad_inputs(tmp):
    g = os.path.join(GOLDEN, "gqa_4_to_1")
    cfg = json.load(open(os.path.join(g, "case.json")))
    q, k, v = (os.path.join(g, f"{n}.npy") for n in "qkv")
    out = os.path.join(tmp, "bad_out.npy")
    lse = os.path.join(tmp, "bad_lse.npy")

    def write_cfg(name, obj_or_text):
        p = os.path.join(tmp, name)
        with open(p, "w") as f:
            f.write(obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text))
        return p

    def write_npy_bytes(name, data):
        p = os.path.join(tmp, name)
        open(p, "wb").write(data)
        return p

    good = write_cfg("good.json", cfg)
    qa = np.load(q)
    qbytes = open(q, "rb").read()
    cases = [
        ("malformed JSON", [write_cfg("m.json", '{"segment_lengths": [32, 64],'), "--q", q, "--k", k, "--v", v], "line"),
        ("unknown field", [write_cfg("u.json", dict(cfg, colour="red")), "--q", q, "--k", k, "--v", v], "colour"),
        ("invalid value", [write_cfg("i.json", dict(cfg, dilation_rates=[1, 65])), "--q", q, "--k", k, "--v", v], "dilation_rates[1]"),
        ("wrong type", [write_cfg("t.json", dict(cfg, head_dim="32")), "--q", q, "--k", k, "--v", v], "head_dim"),
        ("missing config", [os.path.join(tmp, "absent.json"), "--q", q, "--k", k, "--v", v], "absent.json"),
        ("missing array", [good, "--q", os.path.join(tmp, "absent.npy"), "--k", k, "--v", v], "absent.npy"),
        ("head_dim mismatch", [write_cfg("d.json", dict(cfg, head_dim=16)), "--q", q, "--k", k, "--v", v], "head_dim = 16"),
        ("kv heads mismatch", [good, "--q", q, "--k", q, "--v", v], "num_kv_heads = 2"),
        ("seq_len mismatch", [good, "--q", q, "--k", write_npy_bytes("k_short.npy", b""), "--v", v], "k_short.npy"),
        ("dtype mismatch", [write_cfg("h.json", dict(cfg, dtype="float16")), "--q", q, "--k", k, "--v", v], "dtype"),
        ("truncated npy", [good, "--q", write_npy_bytes("trunc.npy", qbytes[: len(qbytes) // 2]), "--k", k, "--v", v], "trunc.npy"),
        ("corrupt magic", [good, "--q", write_npy_bytes("magic.npy", b"XNUMPY" + qbytes[6:]), "--k", k, "--v", v], "magic.npy"),
        ("header garbage", [good, "--q", write_npy_bytes("hdr.npy", qbytes[:10] + b"{'descr': <f4 ???" + qbytes[27:]), "--k", k, "--v", v], "hdr.npy"),
        ("3-d array", [good, "--q", q, "--k", k, "--v", v], None),  # placeholder replaced below
        ("unknown option", [good, "--q", q, "--k", k, "--v", v, "--fast"], "--fast"),
        ("missing --v", [good, "--q", q, "--k", k], "--v"),
        ("bad backend", [good, "--q", q, "--k", k, "--v", v, "--backend", "tpu"], "tpu"),
        ("NUL in a string (named as such, not as a jansson flag)",
         [write_cfg("nul.json", json.dumps(dict(cfg, dtype="float32")).replace('"float32"', '"float32\\u0000x"')),
          "--q", q, "--k", k, "--v", v], "(NUL) character"),
        ("scale past float32", [write_cfg("sc.json", dict(cfg, scale=3.41e38)), "--q", q, "--k", k, "--v", v], "3.41e+38"),
    ]
    p3 = os.path.join(tmp, "q3.npy")
    np.save(p3, qa[0])
    cases[13] = ("3-d array", [good, "--q", p3, "--k", k, "--v", v], "4")
    pshort = os.path.join(tmp, "k_short.npy")
    np.save(pshort, np.load(k)[:, :10])
    pf = os.path.join(tmp, "fortran.npy")
    np.save(pf, np.asfortranarray(qa))
    cases.append(("fortran order", [good, "--q", pf, "--k", k, "--v", v], "fortran"))
    pbe = os.path.join(tmp, "bigend.npy")
    np.save(pbe, qa.astype(">f4"))
    cases.append(("big-endian", [good, "--q", pbe, "--k", k, "--v", v], "bigend.npy"))
    p64 = os.path.join(tmp, "f64.npy")
    np.save(p64, qa.astype(np.float64))
    cases.append(("float64 for a float32 config", [good, "--q", p64, "--k", k, "--v", v], "<f8"))
    for name, args, needle in cases:
        for f in (out, lse):
            if os.path.exists(f):
                os.unlink(f)
        rc, so, err = run("run", *args, "-o", out, "--lse", lse)
        check(rc == 2, f"{name}: exit {rc}, want 2 ({err.strip()})")
        check(needle is None or needle in err, f"{name}: message lacks '{needle}': {err.strip()}")
        check(err.startswith("dilattn: error: "), f"{name}: message format: {err.strip()}")
        check(not os.path.exists(out) and not os.path.exists(lse), f"{name}: left an output file")
    # an existing output is untouched by a failing run
    open(out, "wb").write(b"keep me")
    rc, _, _ = run("run", cases[2][1][0], "--q", q, "--k", k, "--v", v, "-o", out)
    check(rc == 2 and open(out, "rb").read() == b"keep me", "failing run modified an existing output")
    os.unlink(out)
    # output into a folder that does not exist: exit 2, nothing written
    rc, _, err = run("run", good, "--q", q, "--k", k, "--v", v, "-o", os.path.join(tmp, "no", "o.npy"))
    check(rc == 2 and "o.npy" in err, f"unwritable output: {rc} {err}")
    # ... found before anything is read or run (it was found after the kernel ran): an --lse
    # into a missing folder with a --q that does not exist names the --lse
    rc, _, err = run("run", good, "--q", os.path.join(tmp, "no-q.npy"), "--k", k, "--v", v, "-o", out, "--lse",
                     os.path.join(tmp, "no", "l.npy"))
    check(rc == 2 and "--lse" in err and "no-q.npy" not in err and not os.path.exists(out),
          f"unwritable --lse, found first: {rc} {err}")
    # DILATTN_NUM_THREADS past 256: 256, no warning that it is not a number (it said so)
    rc, so, err = run("run", good, "--q", q, "--k", k, "--v", v, "-o", out, env={"DILATTN_NUM_THREADS": "1048577"})
    check(rc == 0 and "not a number" not in err, f"DILATTN_NUM_THREADS=1048577: {rc} {err}")
    if os.path.exists(out):
        os.unlink(out)
    # a CUDA environment variable with a value it does not take: refused on any backend
    rc, _, err = run("run", good, "--q", q, "--k", k, "--v", v, "-o", out, env={"DILATTN_CUDA_MMA": "fast"})
    check(rc == 2 and "DILATTN_CUDA_MMA=fast" in err and not os.path.exists(out), f"DILATTN_CUDA_MMA=fast: {rc} {err}")
    for val, mma in (("wgmma", 2), ("wgmma-overlap", 3), ("wgmma-ws", 4), ("wgmma-ws-p2", 5), ("wgmma-ws-tma", 6),
                     ("auto", 6), ("sync", 1)):
        rc, so, err = run("run", good, "--q", q, "--k", k, "--v", v, "-o", out, env={"DILATTN_CUDA_MMA": val})
        try:
            summary = json.loads(so)
            # the host backend (no GPU here) ignores it; on an sm_90 GPU an fp16/bf16 D 64/128 config reports mma
            check(rc == 0 and summary["cuda_mma"] in (0, 1, 2, mma), f"DILATTN_CUDA_MMA={val}: {rc} {summary}")
        except (ValueError, KeyError) as ex:
            check(False, f"DILATTN_CUDA_MMA={val}: exit {rc}: {ex}: {so} {err}")
        if os.path.exists(out):
            os.unlink(out)
    # unknown command and no command
    rc, _, _ = run("frobnicate")
    check(rc == 2, "unknown command")
    rc, _, _ = run()
    check(rc == 2, "no command")
    # help, asked for: the usage on stdout, exit 0, also after a command (which then does
    # nothing); a config file named help is still a file
    for args in (("--help",), ("-h",), ("help",), ("gen", "--help"), ("tune", "x.json", "-h"), ("run", "-h")):
        rc, so, err = run(*args)
        check(rc == 0 and so.startswith("usage:") and "dilattn gen" in so and not err, f"{args}: exit {rc}: {so!r} {err!r}")
    rc, _, err = run("gen", "help", "-o", tmp)
    check(rc == 2 and "help" in err, f"gen help (a file): exit {rc}: {err}")
    rc, so, err = run("gen", "nonexistent.json", "-o", "-h")
    check(rc == 2 and not so, f"gen -o -h (a folder named -h): exit {rc}: {so!r} {err!r}")
    rc, so, _ = run("gen", "x.json", "--report", "--help")
    check(rc == 0 and so.startswith("usage:"), f"gen --report --help: exit {rc}")
    rc, so, _ = run("--version")
    check(rc == 0 and so.startswith("dilattn "), f"--version: {rc} {so}")
    leftovers = [f for f in os.listdir(tmp) if ".tmp" in f]
    check(not leftovers, f"temp files left behind: {leftovers}")


def test_user_errors(tmp):
    """What a new user runs into (a README walkthrough): each mistake named, with its exit code."""
    # a host compiler that cannot be used: info says why, as it does for NVRTC and CUDA
    for cc, why in (("/nonexistent/cc", "cannot be run"), ("nosuchcc-xyz", "not on PATH"), (" ", "names no program"),
                    (tmp, "not a regular file")):
        rc, out, err = run("info", env={"CC": cc})
        host = json.loads(out)["backends"]["host"] if rc == 0 else {}
        check(host.get("available") is False and why in host.get("reason", ""), f"info with CC={cc!r}: {host}")
    rc, out, _ = run("info")
    check(rc == 0 and "reason" not in json.loads(out)["backends"]["host"], "info: a reason for a usable compiler")
    for args in (("info", "extra"), ("--version", "extra")):
        rc, out, err = run(*args)
        check(rc == 2 and "unexpected argument extra" in err and not out, f"{args}: exit {rc}: {err}")
    # a config with a UTF-8 byte-order mark (Windows editors write one) and numpy's float32
    # maximum as its scale (rounds to FLT_MAX): both taken
    g = golden_run_args()
    c = json.load(open(g[0]))
    c["scale"] = float("3.4028235e38")
    bom = os.path.join(tmp, "bom.json")
    open(bom, "wb").write(b"\xef\xbb\xbf" + json.dumps(c).encode())
    rc, out, err = run("run", bom, *g[1:], "-o", os.path.join(tmp, "bom_o.npy"))
    check(rc == 0, f"a config with a byte-order mark and scale 3.4028235e38: exit {rc}: {err}")
    rc, out, err = run("--version", "--help")  # (--help anywhere: the usage, exit 0)
    check(rc == 0 and "usage" in out.lower(), f"--version --help: exit {rc}: {err}")
    # tune without a database to write: said before the sweep (it ran, then failed on "" or
    # /v1/tuning.jsonl), exit 2, nothing left behind
    cfg = golden_run_args()[0]
    d = os.path.join(tmp, "nodb")
    os.mkdir(d)
    for db_args, env, why in (((("--db", "")), {"DILATTN_CACHE_DIR": d}, "empty path"),
                              ((), {"DILATTN_CACHE_DIR": "", "XDG_CACHE_HOME": "", "HOME": "", "DILATTN_TUNING_DB": ""},
                               "no tuning database")):
        p = subprocess.run([DILATTN, "tune", cfg, "--seq-len", "32", "--reps", "1", *db_args], capture_output=True,
                           text=True, cwd=d, env={**os.environ, **env})
        left = [f for f in os.listdir(d) if f != "v1"]  # (the kernel cache of the first)
        check(p.returncode == 2 and why in p.stderr and "best" not in p.stdout and not left,
              f"tune {db_args}: exit {p.returncode}, left {left}: {p.stderr[-200:]}")
    cfg = os.path.join(GOLDEN, "gqa_4_to_1", "case.json")
    d = os.path.join(tmp, "ue")
    os.mkdir(d)
    # an arch this NVRTC cannot target is a bad argument (exit 2), not a device failure
    if json.loads(run("info")[1])["nvrtc"]["available"]:
        rc, out, err = run("gen", cfg, "--target", "cuda", "--arch", "sm_99", "--report", "-o", d)
        check(rc == 2 and "--arch sm_99" in err and "cannot target" in err and not os.listdir(d),
              f"gen --arch sm_99: exit {rc}: {err}")
    # --threads: at most 64, as documented (64 threads is what runs)
    rc, _, err = run("gen", cfg, "--threads", "65", "--report", "-o", d)
    check(rc == 2 and "0..64" in err, f"gen --threads 65: exit {rc}: {err}")
    # a real where an integer goes: named as the real it is
    c = json.load(open(cfg))
    c["head_dim"] = float(c["head_dim"])
    p = os.path.join(tmp, "real.json")
    open(p, "w").write(json.dumps(c))
    rc, _, err = run("gen", p, "-o", d)
    check(rc == 2 and f"head_dim: expected an integer, got the real number {c['head_dim']}" in err,
          f"head_dim as a real: {err}")
    # a seed past int64 (JSON integers are int64 here): the error says how to write it
    p = os.path.join(tmp, "seed.json")
    open(p, "w").write('{"segment_lengths":[64],"dilation_rates":[1],"num_heads":1,"head_dim":16,"sparsity":'
                       '{"layout":"random","block":8,"seed":18446744073709551615,"density":0.5}}')
    rc, _, err = run("gen", p, "-o", d)
    check(rc == 2 and "too big integer" in err and "seed - 2^64" in err, f"seed of 2^64 - 1: exit {rc}: {err}")
    # elsewhere a too-big integer gets no word of seeds
    p = os.path.join(tmp, "big.json")
    open(p, "w").write('{"segment_lengths":[99999999999999999999],"dilation_rates":[1],"num_heads":1,"head_dim":16}')
    rc, _, err = run("gen", p, "-o", d)
    check(rc == 2 and "too big integer" in err and "64-bit signed" in err and "seed" not in err,
          f"a segment length past int64: exit {rc}: {err}")
    # a config that is a folder
    rc, _, err = run("gen", d, "-o", d)
    check(rc == 2 and "is a folder" in err, f"gen of a folder: exit {rc}: {err}")
    # run: an option given twice; k's shape against the batch and seq_len q gave
    g = os.path.join(GOLDEN, "gqa_4_to_1")
    rc, _, err = run("run", *golden_run_args(), "--q", os.path.join(g, "k.npy"), "-o", os.path.join(d, "o.npy"))
    check(rc == 2 and "--q given twice" in err, f"run --q twice: exit {rc}: {err}")
    rc, _, err = run("run", *golden_run_args(), "--backend", "cuda", "-o", os.path.join(d, "o.npy"))
    check(rc == 2 and "--backend given twice" in err, f"run --backend twice: exit {rc}: {err}")
    for flags in (["-o", ""], ["-o", os.path.join(d, "o.npy"), "--lse", ""]):
        rc, _, err = run("run", *golden_run_args(), *flags)
        check(rc == 2 and "empty path" in err and not os.listdir(d), f"run {flags}: exit {rc}: {err}")
    q = np.load(os.path.join(g, "q.npy"))
    q2 = os.path.join(tmp, "q2.npy")
    np.save(q2, np.concatenate([q, q]))  # batch 2 against k's batch 1
    args = golden_run_args()
    args[args.index("--q") + 1] = q2
    rc, _, err = run("run", *args, "-o", os.path.join(d, "o.npy"))
    check(rc == 2 and f"batch = 2, seq_len = {q.shape[1]}" in err, f"run with k's batch short: exit {rc}: {err}")
    # a cache folder that cannot be made: run works memory-only, warning once (it made two
    # contexts and warned twice)
    blocker = os.path.join(tmp, "a-file")
    open(blocker, "w").write("x")
    rc, _, err = run("run", *golden_run_args(), "-o", os.path.join(d, "o.npy"),
                     env={"DILATTN_CACHE_DIR": os.path.join(blocker, "sub")})
    check(rc == 0 and err.count("kernel cache: cannot use") == 1, f"run with an unusable cache folder: exit {rc}: {err}")
    # a host compile without a usable TMPDIR (an empty cache: it must compile) is the
    # environment's failure, exit 4, not bad input (it was 2)
    rc, _, err = run("run", *golden_run_args(), "-o", os.path.join(d, "o.npy"),
                     env={"DILATTN_CACHE_DIR": os.path.join(tmp, "tmpdir-cache"), "TMPDIR": os.path.join(tmp, "none")})
    check(rc == 4 and "build folder" in err, f"run with TMPDIR missing: exit {rc}: {err}")


def test_generator_exit_codes(tmp):
    """Generator and compiler failures are exit 3 (README): a template past the generator's
    memory limit (it was 4, the status of a process out of memory), a host compiler that
    exits 0 without writing the module (it was 2: "cannot read back"); and an arch-specific
    target below sm_90 is a bad --arch (exit 2) before NVRTC sees it."""
    cfg = os.path.join(GOLDEN, "gqa_4_to_1", "case.json")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "templates")
    bomb = os.path.join(tmp, "bomb", "templates")
    shutil.copytree(src, bomb)
    path = os.path.join(bomb, "host", "kernel.c.tpl")
    text = open(path).read()
    open(path, "w").write("{% local s = 'x' while true do s = s .. s end %}\n" + text)
    d = os.path.join(tmp, "gx")
    os.mkdir(d)
    rc, so, err = run("gen", cfg, "--target", "host", "-o", d, env={"DILATTN_TEMPLATE_DIR": bomb})
    check(rc == 3 and "memory limit" in err and not os.listdir(d), f"a template past the memory limit: exit {rc}: {err}")
    c = json.load(open(cfg))
    c["scale"] = 0.3125  # a kernel no cache holds
    p = os.path.join(tmp, "gx.json")
    open(p, "w").write(json.dumps(c))
    rc, so, err = run("gen", p, "--target", "host", "--compile", "-o", d,
                      env={"CC": "true", "DILATTN_CACHE_DIR": os.path.join(tmp, "gx-cache")})
    check(rc == 3 and "left no module" in err, f"a compiler that writes nothing: exit {rc}: {err}")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    rc, so, err = run("gen", cfg, "--target", "cuda", "--arch", "sm_80a", "--report", "-o", d)
    check(rc == 2 and "sm_90" in err and not os.listdir(d), f"gen --arch sm_80a --report: exit {rc}: {err}")


def test_next_key_tile_overflow(tmp):
    """A sparse layout whose stride x block passes 2^63 (both may be up to 2^40): past the
    query's own block, the next key tile (da_next_key_tile, control.inc.tpl) computed
    nk * BLOCK in 64 bits, wrapped to 0, and sent the key loop back to the segment's start
    for ever. It must say "no more tiles" (2^62) instead. Called directly, from the
    generated host source, since a real run would need 2^30 keys a block."""
    cfg = os.path.join(tmp, "stride.json")
    json.dump({"segment_lengths": [1 << 32], "dilation_rates": [1], "num_heads": 1, "head_dim": 8,
               "sparsity": {"layout": "dilated_sparse", "block": 1 << 30, "strides": [1 << 40]}}, open(cfg, "w"))
    out = os.path.join(tmp, "stride")
    os.makedirs(out, exist_ok=True)
    rc, stdout, err = run("gen", cfg, "-o", out)
    src = stdout.strip().splitlines()[-1] if rc == 0 and stdout.strip() else ""
    check(rc == 0 and src.endswith(".c"), f"gen of the wide-stride config: exit {rc}: {err}")
    if not src:
        return
    harness = os.path.join(tmp, "stride_main.c")
    with open(harness, "w") as f:
        f.write(f'#include "{src}"\n#include <stdio.h>\n'
                "int main(void) {\n"
                "  /* key 2^31 (block 2): past query block 0, whose only other block is 2^40 away */\n"
                "  printf(\"%lld\\n\", (long long)da_next_key_tile((da_i64)1 << 31, 0, 0));\n"
                "  return 0;\n}\n")
    exe = os.path.join(tmp, "stride_main")
    cc = os.environ.get("CC", "cc")
    p = subprocess.run([cc, "-O1", "-fsanitize=undefined", "-fno-sanitize-recover=all", "-w", harness, "-o", exe, "-lm"],
                       capture_output=True, text=True)
    if p.returncode != 0:  # no UBSan runtime: plain
        p = subprocess.run([cc, "-O1", "-w", harness, "-o", exe, "-lm"], capture_output=True, text=True)
    check(p.returncode == 0, f"compiling the harness: {p.stderr[-400:]}")
    if p.returncode != 0:
        return
    r = subprocess.run([exe], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.strip() == str(1 << 62),
          f"da_next_key_tile past every key: exit {r.returncode}, {r.stdout.strip()} (want {1 << 62}) {r.stderr[-300:]}")


def test_bundle_compiles_strictly(tmp):
    """A bundle's NAME_bundle.c and NAME.h compile without a warning under C99 -pedantic
    -Werror (and as C++ where there is a C++ compiler): the manifest, once a string literal,
    passed C99's 4095 characters with a few configs (-Woverlength-strings broke -Werror
    projects), and NAME_register had no prototype (-Wmissing-prototypes)."""
    d = os.path.join(tmp, "strict")
    os.mkdir(d)
    configs = [os.path.join(GOLDEN, c, "case.json") for c in sorted(os.listdir(GOLDEN))
               if os.path.exists(os.path.join(GOLDEN, c, "case.json"))][:8]
    named = []
    for i, c in enumerate(configs):  # (one identifier each: case_0.json ...)
        p = os.path.join(d, f"case_{i}.json")
        shutil.copy(c, p)
        named.append(p)
    rc, so, err = run("gen", *named, "--bundle", "strict", "-o", d)
    check(rc == 0, f"gen --bundle of {len(named)} configs: exit {rc}: {err}")
    if rc != 0:
        return
    mlen = os.path.getsize(os.path.join(d, "manifest.json"))
    check(mlen > 4095, f"the manifest is {mlen} bytes: too short to test C99's string limit")
    include = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include")
    main_c = os.path.join(d, "main.c")
    open(main_c, "w").write('#include "strict.h"\nint main(void) { return 0; }\n')
    cc = os.environ.get("CC", "cc")
    flags = ["-Wall", "-Wextra", "-pedantic", "-Werror", "-I", include, "-I", d]
    p = subprocess.run([cc, "-std=c99", "-Wmissing-prototypes", *flags, main_c, os.path.join(d, "strict_bundle.c"),
                        "-c"], capture_output=True, text=True, cwd=d)
    check(p.returncode == 0, f"C99 -pedantic -Werror on the bundle: {p.stderr[-600:]}")
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx:
        p = subprocess.run([cxx, "-x", "c++", *flags, os.path.join(d, "strict_bundle.c"), "-c", "-o",
                            os.path.join(d, "b.o")], capture_output=True, text=True, cwd=d)
        check(p.returncode == 0, f"C++ -pedantic -Werror on the bundle: {p.stderr[-600:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="dilattn-cli-")
    try:
        test_info()
        test_gen(tmp)
        test_gen_wgmma(tmp)
        test_old_templates(tmp)
        test_run_golden(tmp)
        test_run_bf16(tmp)
        test_run_outputs(tmp)
        test_run_special_outputs(tmp)
        test_stale_build_folders(tmp)
        test_json_escaped(tmp)
        test_stdout_errors(tmp)
        test_gen_checks_first(tmp)
        test_gen_refusals(tmp)
        test_bundle_compiles_strictly(tmp)
        test_gen_compile_all_or_nothing(tmp)
        test_gen_writes_all_or_nothing(tmp)
        test_readme_example(tmp)
        test_fake_device(tmp)
        test_gen_auto(tmp)
        test_cache(tmp)
        test_bad_inputs(tmp)
        test_user_errors(tmp)
        test_generator_exit_codes(tmp)
        test_next_key_tile_overflow(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
