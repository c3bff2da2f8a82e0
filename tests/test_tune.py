#!/usr/bin/env python3
"""test_tune.py - `dilattn tune` on the host backend (issue 6): a whole sweep (CSV, PNG,
database), failures labelled instead of aborting, the database round trip (a plan picks
the tuned parameters; DILATTN_TUNING=0 does not), a database of another environment
ignored and not overwritten, and two tuners writing one database at once losing no record.

Run: python3 tests/test_tune.py build/dilattn   (ctest -R tune)
"""
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, report  # noqa: E402

DILATTN = os.path.abspath(sys.argv[1])
# tune's --backend defaults to auto: the variable keeps these sweeps on the host on a GPU
# machine too (section 14 checks that it is read)
os.environ["DILATTN_BACKEND"] = "host"


def run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([DILATTN, *args], capture_output=True, text=True, env=e)


tmp = tempfile.mkdtemp(prefix="dilattn-tune-")
try:
    db = os.path.join(tmp, "db.jsonl")
    cfg_a = os.path.join(tmp, "a.json")
    cfg_b = os.path.join(tmp, "b.json")
    cfg_c = os.path.join(tmp, "wide.json")
    json.dump({"segment_lengths": [32, 64], "dilation_rates": [1, 2], "num_heads": 2, "head_dim": 16}, open(cfg_a, "w"))
    json.dump({"segment_lengths": [48], "dilation_rates": [3], "num_heads": 2, "head_dim": 8, "causal": True}, open(cfg_b, "w"))
    json.dump({"segment_lengths": [64], "dilation_rates": [1], "num_heads": 1, "head_dim": 512}, open(cfg_c, "w"))

    # 1. a whole sweep
    out_csv, png = os.path.join(tmp, "a.csv"), os.path.join(tmp, "a.png")
    p = run("tune", cfg_a, "--seq-len", "256", "--reps", "3", "-o", out_csv, "--plot", png, "--db", db)
    check(p.returncode == 0, f"tune exit {p.returncode}: {p.stderr}")
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    rows = list(csv.DictReader(open(out_csv)))
    check(len(rows) == summary["candidates"] and len(rows) >= 17, f"{len(rows)} CSV rows, summary {summary}")
    check(sum(r["default"] == "1" for r in rows) == 1, "exactly one default candidate")
    check(sum(r["best"] == "best" for r in rows) == 1, "exactly one best candidate")
    check({r["strategy"] for r in rows if r["status"] == "ok"} >= {"fused", "split"}, "both strategies swept")
    check(all(float(r["median_ms"]) > 0 for r in rows if r["status"] == "ok"), "timings recorded")
    # a candidate that renders the default's kernel (host: 32 x 64, the default's tiles) is
    # not timed again: it carries that kernel's timing and says so
    same = [r for r in rows if r["label"].startswith("the kernel of candidate ")]
    check(any(r["tile_q"] == "32" and r["tile_k"] == "64" for r in same), f"32 x 64 timed again: {same}")
    for r in same:
        j = int(r["label"].split()[4].rstrip(","))
        check(rows[j]["median_ms"] == r["median_ms"] and rows[j]["strategy"] == r["strategy"], f"{r} against {rows[j]}")
    check(open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "plot is a PNG")
    lines = open(db).read().splitlines()
    check(json.loads(lines[0]).get("dilattn_tuning_db") == 1, "database header")
    recs = [json.loads(x) for x in lines[1:]]
    check(len(recs) == len(rows), f"{len(recs)} records for {len(rows)} candidates")
    best = next(r for r in rows if r["best"] == "best")
    rec_a, header_a = dict(next(r for r in recs if r["status"] == "ok")), lines[0]  # cfg_a's (section 16)
    run_a = ["run", cfg_a, "--q", os.path.join(tmp, "q.npy"), "--k", os.path.join(tmp, "k.npy"),
             "--v", os.path.join(tmp, "v.npy"), "-o", os.path.join(tmp, "o.npy")]

    # 2. failures are labelled, the sweep goes on (head_dim 512: big tiles break the L2 budget)
    p = run("tune", cfg_c, "--seq-len", "128", "--reps", "2", "-o", os.path.join(tmp, "c.csv"), "--db", db)
    rows_c = list(csv.DictReader(open(os.path.join(tmp, "c.csv"))))
    bad = [r for r in rows_c if r["status"] != "ok"]
    check(p.returncode == 0 and bad and all(r["status"] == "constraints" and "KiB" in r["label"] for r in bad),
          f"constraint labels: {[(r['status'], r['label']) for r in bad]}")
    check(any(r["status"] == "ok" for r in rows_c), "some wide candidates ran")

    # 3. a plan picks the tuned parameters for the nearest shape bucket
    rng = np.random.default_rng(1)
    for n in "qkv":
        np.save(os.path.join(tmp, f"{n}.npy"), rng.standard_normal((1, 300, 2, 16)).astype(np.float32))
    args = ["run", cfg_a, "--q", os.path.join(tmp, "q.npy"), "--k", os.path.join(tmp, "k.npy"),
            "--v", os.path.join(tmp, "v.npy"), "-o", os.path.join(tmp, "o.npy")]
    p = run(*args, env={"DILATTN_TUNING_DB": db})
    info = json.loads(p.stdout)
    want_q = int(best["tile_q"]) or 32
    want_k = int(best["tile_k"]) or 64
    check(p.returncode == 0 and info["tile_q"] == want_q and info["tile_k"] == want_k and info["strategy"] == best["strategy"],
          f"run used {info.get('tile_q')}/{info.get('tile_k')}/{info.get('strategy')}, best is {want_q}/{want_k}/{best['strategy']}")
    p = run(*args, env={"DILATTN_TUNING_DB": db, "DILATTN_TUNING": "0"})
    info = json.loads(p.stdout)
    check(info["tile_q"] == 32 and info["tile_k"] == 64, f"DILATTN_TUNING=0 still tuned: {info}")

    # 4. another environment's database: ignored by plans, not overwritten by the tuner
    foreign = os.path.join(tmp, "foreign.jsonl")
    header = json.loads(lines[0])
    header["env"]["cpu"] = "some other machine"
    text = json.dumps(header) + "\n" + "\n".join(lines[1:]) + "\n"
    open(foreign, "w").write(text)
    foreign_csv = os.path.join(tmp, "foreign.csv")
    p = run("tune", cfg_a, "--seq-len", "256", "--reps", "1", "--db", foreign, "-o", foreign_csv)
    # refused before the sweep (exit 2, nothing tuned or written), not after it
    check(p.returncode == 2 and "another environment" in p.stderr and "--db" in p.stderr and not p.stdout
          and not os.path.exists(foreign_csv), f"tuner on a foreign db: {p.returncode} {p.stdout[:80]} {p.stderr}")
    # ... naming what differs (it listed "library, CUDA, driver or GPU", whatever differed)
    check("cpu:" in p.stderr and "some other machine" in p.stderr, f"the tuner's refusal names no difference: {p.stderr}")
    check(open(foreign).read() == text, "foreign database was modified")
    p = run(*args, env={"DILATTN_TUNING_DB": foreign})
    info = json.loads(p.stdout)
    check(info["tile_q"] == 32 and info["tile_k"] == 64, f"foreign database used: {info}")
    # ... and said so, with what differs (it was an info line: a sweep lost in silence)
    check("warning" in p.stderr and "another environment" in p.stderr and "some other machine" in p.stderr
          and "cpu:" in p.stderr, f"an ignored database is not named with the difference: {p.stderr}")

    # 4b. a header differing in a field only the other backend depends on: these host
    # records count (a database was whole or nothing: one GPU, compiler or NVRTC of
    # another made every record of it unused), and a host sweep merges into it keeping the
    # header; one the host depends on (cc) leaves them out, with a warning naming it
    # (one record of tiles other than the defaults made the fastest: the sweep's own best
    # may be the defaults, which a plan takes tuned or not)
    fast = [json.loads(x) for x in lines[1:]]
    pick = next(r for r in fast if r["spec_hash"] == rec_a["spec_hash"] and r["status"] == "ok"
                and (r["tile_q"], r["tile_k"]) not in ((0, 0), (32, 64)))
    pick["median_ms"] = pick["min_ms"] = 1e-6  # (min <= median <= max: a record the tuner could write)
    for field, value, used in (("gpu", "another GPU driver 1", True), ("nvrtc", "9.9", True),
                               ("cc", "another-cc", False)):
        other = os.path.join(tmp, f"other-{field}.jsonl")
        header = json.loads(lines[0])
        header["env"][field] = value
        open(other, "w").write(json.dumps(header) + "\n" + "\n".join(json.dumps(r) for r in fast) + "\n")
        p = run(*args, env={"DILATTN_TUNING_DB": other})
        info = json.loads(p.stdout)
        tuned = info["tile_q"] == pick["tile_q"] and info["tile_k"] == pick["tile_k"]
        check(tuned == used and (("warning" in p.stderr and field in p.stderr) != used),
              f"a database of another {field}: tuned {tuned} (want {used}), {p.stderr.strip()}")
        p = run("tune", cfg_b, "--seq-len", "128", "--reps", "1", "--threads", "1", "--db", other)
        kept = json.loads(open(other).read().splitlines()[0])["env"][field] == value
        check((p.returncode == 0 and kept) if used else (p.returncode == 2 and field in p.stderr),
              f"a host sweep into a database of another {field}: exit {p.returncode}, header kept {kept}, {p.stderr.strip()[-200:]}")

    # 5. two tuners writing one database at once lose no record
    shared = os.path.join(tmp, "shared.jsonl")
    procs = [subprocess.Popen([DILATTN, "tune", c, "--seq-len", "128", "--reps", "2", "--threads", "1", "--db", shared],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in (cfg_a, cfg_b)]
    outs = [p.communicate() for p in procs]
    check(all(p.returncode == 0 for p in procs), f"concurrent tuners: {[o[1] for o in outs]}")
    counts = [json.loads(o[0].strip().splitlines()[-1])["candidates"] for o in outs]
    recs = [json.loads(x) for x in open(shared).read().splitlines()[1:]]
    check(len(recs) == sum(counts), f"{len(recs)} records, expected {sum(counts)}")
    check(len({r["spec_hash"] for r in recs}) == 2, "records of both specs present")

    # 6. bad arguments
    p = run("tune", cfg_a)
    check(p.returncode == 2 and "--seq-len" in p.stderr, "missing --seq-len")
    # numbers are whole and in range: "16k" is not 16, "2x" not 2 (nothing tuned, no db)
    for opt, val in (("--seq-len", "16k"), ("--seq-len", "0"), ("--batch", "2x"), ("--reps", "abc"),
                     ("--threads", "-1"), ("--reps", "1001")):
        bad_db = os.path.join(tmp, "bad.jsonl")
        base = [] if opt == "--seq-len" else ["--seq-len", "64"]
        p = run("tune", cfg_a, *base, opt, val, "--db", bad_db)
        check(p.returncode == 2 and f"{opt} '{val}'" in p.stderr and not os.path.exists(bad_db),
              f"tune {opt} {val}: rc {p.returncode}, {p.stderr.strip()[-200:]}")

    # 6b. inputs that do not fit (16 TiB): exit 4 before any candidate compiles (each was
    # compiled first, minutes at the largest, then the allocation failed); nothing in the
    # kernel cache, no database
    kc = os.path.join(tmp, "huge-kcache")
    huge_db = os.path.join(tmp, "huge.jsonl")
    p = run("tune", cfg_a, "--seq-len", str(1 << 32), "--batch", "64", "--reps", "1", "--db", huge_db,
            env={"DILATTN_CACHE_DIR": kc})
    check(p.returncode == 4 and "out of memory for the tuning inputs" in p.stderr and not os.path.exists(huge_db)
          and not [f for _, _, fs in os.walk(kc) for f in fs if not f.endswith(".lock")],
          f"tune --seq-len 2^32 --batch 64: rc {p.returncode}, cache {[fs for _, _, fs in os.walk(kc)]}: {p.stderr.strip()[-300:]}")

    # 6c. a sweep of two configs interrupted (SIGINT) during the second keeps the first's
    # rows in the CSV, as the database keeps its records (the CSV was written at the end
    # only: nothing)
    int_csv, int_db = os.path.join(tmp, "int.csv"), os.path.join(tmp, "int.jsonl")
    env_int = dict(os.environ, DILATTN_CACHE_DIR=os.path.join(tmp, "int-kcache"))  # (compiles: seconds)
    p = subprocess.Popen([DILATTN, "tune", cfg_a, cfg_c, "--seq-len", "64", "--reps", "1", "-o", int_csv,
                          "--db", int_db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_int)
    first = p.stdout.readline()  # the first config's summary, flushed once it is merged
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=300)
    rows = list(csv.DictReader(open(int_csv))) if os.path.exists(int_csv) else []
    check(first.startswith("{") and rows and {r["config"] for r in rows} == {cfg_a}
          and not [f for f in os.listdir(tmp) if f.startswith("int.csv.tmp")],
          f"tune interrupted in its second config: first line {first[:80]!r}, CSV rows of "
          f"{sorted({r['config'] for r in rows})}, folder {sorted(f for f in os.listdir(tmp) if f.startswith('int'))}")

    # 7. the summary is JSON whatever the paths hold: the config and database paths escaped
    odd = os.path.join(tmp, 'o"dd\\dir')
    os.mkdir(odd)
    cfg_q = os.path.join(odd, 'c"fg.json')
    shutil.copy(cfg_b, cfg_q)
    db_q = os.path.join(odd, 'd"b\tx.jsonl')
    p = run("tune", cfg_q, "--seq-len", "16", "--reps", "1", "--db", db_q)
    try:
        summ = json.loads(p.stdout)
        check(p.returncode == 0 and summ["config"] == cfg_q and summ["db"] == db_q, f"tune summary paths: {summ}")
    except ValueError as ex:
        check(False, f"tune printed invalid JSON for {cfg_q!r}: {ex}: {p.stdout!r} {p.stderr}")

    # 8. a write error on stdout is an error (exit 2), not a success
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            p = subprocess.run([DILATTN, "tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", db_q], stdout=full,
                               stderr=subprocess.PIPE, text=True)
        check(p.returncode == 2 and "standard output" in p.stderr, f"tune >/dev/full: exit {p.returncode}: {p.stderr}")

    # 9. every config is loaded before anything is tuned: one bad config is exit 2 with the
    # existing CSV, the database and stdout untouched; so are more than 64 configs
    bad_cfg = os.path.join(tmp, "bad.json")
    json.dump({"segment_lengths": [48], "dilation_rates": [3], "num_heads": 2, "head_dim": 8, "colour": 1},
              open(bad_cfg, "w"))
    keep_csv, db9 = os.path.join(tmp, "t.csv"), os.path.join(tmp, "db9.jsonl")
    for cfgs in ((cfg_b, bad_cfg), (bad_cfg, cfg_b), (cfg_b, os.path.join(tmp, "absent.json"))):
        open(keep_csv, "w").write("keep\n")
        p = run("tune", *cfgs, "--seq-len", "16", "--reps", "1", "-o", keep_csv, "--db", db9)
        check(p.returncode == 2 and cfgs[0 if cfgs[0] != cfg_b else 1] in p.stderr and open(keep_csv).read() == "keep\n"
              and not os.path.exists(db9) and not p.stdout,
              f"tune {[os.path.basename(c) for c in cfgs]}: exit {p.returncode}, csv {open(keep_csv).read()[:40]!r}, "
              f"db {os.path.exists(db9)}: {p.stdout[:100]} {p.stderr.strip()[-200:]}")
    p = run("tune", *([cfg_b] * 65), "--seq-len", "16", "--reps", "1", "-o", keep_csv, "--db", db9)
    check(p.returncode == 2 and "64" in p.stderr and open(keep_csv).read() == "keep\n" and not os.path.exists(db9),
          f"tune of 65 configs: exit {p.returncode}: {p.stderr.strip()[-200:]}")
    check(not [f for f in os.listdir(tmp) if ".tmp" in f], f"temp files left: {os.listdir(tmp)}")

    # 10. a plot that cannot be written is an error (exit 2), like the CSV; with several
    # configs the plots are PNG.0.png, PNG.1.png, ...
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--plot", os.path.join(tmp, "nodir", "p.png"), "--db", db9)
    check(p.returncode == 2 and "p.png" in p.stderr, f"tune --plot into a missing folder: exit {p.returncode}: {p.stderr}")
    # ... also when that shows only at the end: a full device (a private node of /dev/full,
    # made where we may: as root; written into, never replaced). A name within 11 bytes of
    # NAME_MAX, which its temp file's could not extend, now works.
    if os.geteuid() == 0:
        import stat
        full = os.path.join(tmp, "full")
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--plot", full, "--db", db9)
        check(p.returncode == 2 and "cannot write" in p.stderr and stat.S_ISCHR(os.stat(full).st_mode),
              f"tune --plot that cannot be written at the end: exit {p.returncode}: {p.stderr[-200:]}")
    long_png = os.path.join(tmp, "p" * 247 + ".png")
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--plot", long_png, "--db", db9)
    check(p.returncode == 0 and open(long_png, "rb").read(4) == b"\x89PNG",
          f"tune --plot <a 251-byte name>: exit {p.returncode}: {p.stderr[-200:]}")
    os.unlink(long_png)
    png2 = os.path.join(tmp, "two.png")
    p = run("tune", cfg_a, cfg_b, "--seq-len", "16", "--reps", "1", "--plot", png2, "--db", db9)
    check(p.returncode == 0 and all(open(f"{png2}.{i}.png", "rb").read(4) == b"\x89PNG" for i in (0, 1))
          and not os.path.exists(png2), f"tune --plot of two configs: exit {p.returncode}: {os.listdir(tmp)}")

    # 11. the CSV quotes its text fields (a config path with a comma and a quote reads back)
    odd_dir = os.path.join(tmp, 'a,b"c')
    os.mkdir(odd_dir)
    odd_cfg = os.path.join(odd_dir, "cfg.json")
    shutil.copy(cfg_b, odd_cfg)
    odd_csv = os.path.join(tmp, "odd.csv")
    p = run("tune", odd_cfg, "--seq-len", "16", "--reps", "1", "-o", odd_csv, "--db", db9)
    rows = list(csv.DictReader(open(odd_csv))) if p.returncode == 0 else []
    check(rows and all(r["config"] == odd_cfg and r["cuda_mma"] != "" for r in rows),
          f"tune CSV with a comma and a quote in the config path: exit {p.returncode}: {rows[:1]} {p.stderr[-200:]}")

    # 14. DILATTN_BACKEND picks the backend of --backend auto (the default), as for run:
    # junk is exit 2; cuda where no GPU is usable is exit 4 before anything compiles
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", db9, env={"DILATTN_BACKEND": "gpu"})
    check(p.returncode == 2 and "DILATTN_BACKEND" in p.stderr, f"DILATTN_BACKEND=gpu: exit {p.returncode}: {p.stderr}")
    info = json.loads(run("info").stdout)
    if not info["backends"]["cuda"]["available"]:
        p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", db9, env={"DILATTN_BACKEND": "cuda"})
        check(p.returncode == 4 and "CUDA backend" in p.stderr and not p.stdout,
              f"DILATTN_BACKEND=cuda without a GPU: exit {p.returncode}: {p.stdout[:100]} {p.stderr[-200:]}")

    # ... nor a folder (it read as no records, then the merge failed after the sweep)
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", tmp)
    check(p.returncode == 2 and "not a regular file" in p.stderr and not p.stdout, f"--db a folder: {p.returncode}: {p.stderr}")
    # every candidate tried failing to compile, some pruned before: still exit 3
    p = run("tune", cfg_c, "--seq-len", "16", "--reps", "1", "--db", os.path.join(tmp, "dbc.jsonl"), env={"CC": "false"})
    check(p.returncode == 3 and "no candidate ran" in p.stderr, f"CC=false with pruned candidates: exit {p.returncode}")
    # a compiler that cannot run at all is the environment's failure: exit 4, as run's and
    # gen's (it was 3, as if every candidate's source were bad)
    for i, env in enumerate(({"CC": "dilattn-no-such-cc"}, {"TMPDIR": os.path.join(tmp, "no-such-dir")})):
        env["DILATTN_CACHE_DIR"] = os.path.join(tmp, f"kc-no-cc{i}")  # (compiled, not found in the cache)
        p = run("tune", cfg_c, "--seq-len", "16", "--reps", "1", "--db", os.path.join(tmp, f"dbc{i}.jsonl"), env=env)
        check(p.returncode == 4 and "no candidate ran" in p.stderr, f"tune with {env}: exit {p.returncode}: {p.stderr[-300:]}")

    # 15. a database that is not one (no environment header) is named as such, before the sweep
    junk = os.path.join(tmp, "junk.jsonl")
    open(junk, "w").write("{garbage\n")
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", junk)
    check(p.returncode == 2 and "cannot be read as a tuning database" in p.stderr and not p.stdout
          and open(junk).read() == "{garbage\n", f"tune on a junk db: exit {p.returncode}: {p.stderr[-200:]}")
    # every candidate failing to compile: said on stderr, exit 3 (a compile failure), no best
    db15, tmpdir15 = os.path.join(tmp, "db15.jsonl"), os.path.join(tmp, "tmpdir15")
    os.mkdir(tmpdir15)
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", db15, env={"CC": "false", "TMPDIR": tmpdir15})
    check(p.returncode == 3 and "no candidate ran" in p.stderr and "compile" in p.stderr,
          f"tune with every compile failing: exit {p.returncode}: {p.stderr[-300:]}")
    # ... leaving the first 4 failed builds' folders for inspection, not one a candidate
    kept = [f for f in os.listdir(tmpdir15) if f.startswith("dilattn-build-")]
    check(len(kept) == 4, f"failed builds kept: {len(kept)} folders")
    # the CSV and the chart take the umask, like run's outputs (mkstemp's 0600 before)
    csv15, png15 = os.path.join(tmp, "m.csv"), os.path.join(tmp, "m.png")
    # (another database: CC is part of the host tuner's environment header)
    p = subprocess.run([DILATTN, "tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", db9, "-o", csv15,
                        "--plot", png15], capture_output=True, text=True, preexec_fn=lambda: os.umask(0o027))
    modes = [oct(os.stat(f).st_mode & 0o777) if os.path.exists(f) else None for f in (csv15, png15)]
    check(p.returncode == 0 and modes == ["0o640", "0o640"], f"tune outputs under umask 027: exit {p.returncode}: {modes}")

    # 16. a damaged or hand-edited database is advice, never a failure: records out of range
    # (a bucket of INT_MIN, a tile_q the planner refuses, a spec_hash that is not 64 hex
    # digits) are skipped, and a record the planner refuses falls back to its defaults
    rec = rec_a  # one of cfg_a's records (N = 256: bucket 8); run_a: N = 300, bucket 8
    def db_with(*records):
        path = os.path.join(tmp, "edited.jsonl")
        open(path, "w").write("\n".join([header_a] + [json.dumps(r) for r in records]) + "\n")
        return path
    def run_info(path):
        p = run(*run_a, env={"DILATTN_TUNING_DB": path})
        return p.returncode, json.loads(p.stdout) if p.returncode == 0 else p.stderr
    good = dict(rec, bucket=16, seq_len=65536, tile_q=8, tile_k=16, fused_min_queries=0, median_ms=1.0, min_ms=1.0,
                max_ms=1.0)
    fastest = dict(median_ms=0.001, min_ms=0.001, max_ms=0.001)
    for bad in (dict(rec, bucket=-2**31, tile_q=64, tile_k=32, **fastest),
                dict(rec, bucket=8, tile_q=64, tile_k=32, spec_hash=rec["spec_hash"][:63] + "\u00e9", **fastest),
                # what the tuner never writes (helper-60): an ok record without a median (read
                # as 0 ms, the fastest) or with a negative one, min above median, no reps, a
                # bucket that is not its length's log2, a status it does not know
                {k: v for k, v in dict(rec, bucket=8, tile_q=64, tile_k=32, **fastest).items() if k != "median_ms"},
                dict(rec, bucket=8, tile_q=64, tile_k=32, median_ms=-1, min_ms=-1, max_ms=-1),
                dict(rec, bucket=8, tile_q=64, tile_k=32, median_ms=0.001, min_ms=0.002, max_ms=0.003),
                dict(rec, bucket=8, tile_q=64, tile_k=32, reps=0, **fastest),
                dict(rec, bucket=9, tile_q=64, tile_k=32, **fastest),
                dict(rec, bucket=8, tile_q=64, tile_k=32, status="great", **fastest)):
        rc, info = run_info(db_with(good, bad))
        check(rc == 0 and info["tile_q"] == 8 and info["tile_k"] == 16, f"damaged record {bad} chosen: {rc} {info}")
    # a line whose record ends at a NUL (helper-63): not read as that record (it was, the rest dropped)
    nul_db = os.path.join(tmp, "nul.jsonl")
    open(nul_db, "w").write("\n".join([header_a, json.dumps(good),
                                       json.dumps(dict(rec, bucket=8, tile_q=64, tile_k=32, **fastest)) + "\0tail"]) + "\n")
    rc, info = run_info(nul_db)
    check(rc == 0 and info["tile_q"] == 8 and info["tile_k"] == 16, f"a record before a NUL on its line: taken {info}")
    rc, info = run_info(db_with(dict(rec, bucket=8, tile_q=4096, tile_k=64, median_ms=0.001)))
    check(rc == 0 and info["tile_q"] == 32 and info["tile_k"] == 64, f"a tile_q of 4096 in the db: {rc} {info}")
    rc, info = run_info(db_with(dict(rec, bucket=8, tile_q=256, tile_k=1024, median_ms=0.001)))
    check(rc == 0, f"a record the planner refuses (host tile buffer 256 x 1024) fails the plan: {rc} {info}")

    # 12. -o, --plot and the database are three files
    same = os.path.join(tmp, "same.out")
    for args in (("-o", same, "--plot", same, "--db", db9), ("-o", same, "--db", same)):
        p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", *args)
        check(p.returncode == 2 and "name the same file" in p.stderr and not os.path.exists(same),
              f"tune {args}: exit {p.returncode}: {p.stderr[-200:]}")

    def tune_planted(name, line, replacement, cfg, seq_len):
        """tune cfg at seq_len with host kernels from a copy of templates/ whose line (which
        must be there) is replaced: (the process, the CSV's rows)"""
        tdir = os.path.join(tmp, "templates-" + name)
        shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "templates"), tdir)
        kt = os.path.join(tdir, "host", "kernel.c.tpl")
        text = open(kt).read()
        check(line in text, f"the host template's line {line!r} (test {name} plants a change in it)")
        open(kt, "w").write(text.replace(line, replacement))
        out = os.path.join(tmp, name + ".csv")
        p = run("tune", cfg, "--seq-len", str(seq_len), "--reps", "1", "-o", out, "--db",
                os.path.join(tmp, name + ".jsonl"), env={"DILATTN_TEMPLATE_DIR": tdir})
        return p, list(csv.DictReader(open(out))) if os.path.exists(out) else []

    # 13. the correctness check reads lse too: kernels (a planted template) whose out is
    # right and whose lse is off by 0.5 are not ok (they were, and could be chosen)
    lse_line = "*lse = T->m[j] + logf(T->l[j]);"
    p, rows_l = tune_planted("lse", lse_line, "*lse = T->m[j] + logf(T->l[j]) + 0.5f;", cfg_b, 64)
    check(p.returncode == 4 and rows_l and all(r["status"] == "correctness" and "(lse)" in r["label"] for r in rows_l),
          f"kernels with a wrong lse: exit {p.returncode}, {[(r['status'], r['label']) for r in rows_l][:3]} "
          f"{p.stderr[-300:]}")

    # 15. every candidate agrees with the default at the tuning length, not only on the 384
    # positions the float64 check sees: float16 kernels (a planted template) with 8-query
    # tiles whose out goes wrong past position 512 are not ok there, and one of the others is chosen
    out_line = "for (int x = 0; x < HD; x++) o[x] = T->acc[j][x] * inv;"
    cfg_h = os.path.join(tmp, "b16.json")  # float16: out through its own decode in the check
    json.dump(dict(json.load(open(cfg_b)), dtype="float16"), open(cfg_h, "w"))
    p, rows_f = tune_planted("far", out_line, "for (int x = 0; x < HD; x++) o[x] = T->acc[j][x] * inv + "
                                              "(TQ == 8 && T->pos[j] >= 512 ? 0.5f : 0.0f);", cfg_h, 1024)
    bad = [r for r in rows_f if r["tile_q"] == "8"]
    good = [r for r in rows_f if r["tile_q"] != "8" and r["status"] == "ok"]
    best = [r for r in rows_f if r["best"] == "best"]
    check(p.returncode == 0 and bad and all(r["status"] == "correctness" and "seq_len 1024" in r["label"] and
                                            "(the default)" in r["label"] for r in bad) and good and
          best and best[0]["tile_q"] != "8",
          f"8-query kernels wrong past 512: exit {p.returncode}, {[(r['tile_q'], r['status'], r['label']) for r in rows_f][:6]} "
          f"{p.stderr[-300:]}")

    # 16. a kernel that writes NaN is not ok: the float64 check took the largest error with
    # fmax, which drops a NaN, so kernels whose out is NaN everywhere passed it. The default's
    # 32-query tiles write NaN here: it passed, became the reference of the full-length check,
    # every other candidate "disagreed" with it, and it was chosen
    p, rows_n = tune_planted("nan", out_line, "for (int x = 0; x < HD; x++) o[x] = T->acc[j][x] * inv + "
                                              "(TQ == 32 ? NAN : 0.0f);", cfg_b, 64)
    nan_rows = [r for r in rows_n if r["tile_q"] in ("0", "32")]
    others = [r for r in rows_n if r["tile_q"] not in ("0", "32")]
    check(p.returncode == 0 and nan_rows and all(r["status"] == "correctness" and "max error nan" in r["label"]
                                                  for r in nan_rows) and others and
          all(r["status"] == "ok" for r in others) and not any(r["best"] == "best" for r in nan_rows),
          f"kernels writing NaN: exit {p.returncode}, {[(r['tile_q'], r['status'], r['label']) for r in rows_n][:8]} "
          f"{p.stderr[-300:]}")

    # 14. a merge keeps the database's mode (a team's shared 0644 file became 0600, which
    # the others could then not read)
    mdb = os.path.join(tmp, "mode.jsonl")
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", mdb)
    os.chmod(mdb, 0o640)
    p2 = run("tune", cfg_b, "--seq-len", "64", "--reps", "1", "--db", mdb)
    check(p.returncode == 0 and p2.returncode == 0 and os.stat(mdb).st_mode & 0o777 == 0o640,
          f"database mode after a merge: {oct(os.stat(mdb).st_mode & 0o777)} (want 0o640): {p2.stderr[-200:]}")

    # 18. refused before the sweep (helper-57): several configs' plots to a stream (they were
    # PLOT.0.png beside /dev/null), PLOT.N.png names past NAME_MAX (found after the sweep
    # and its merge), a <db>.lock that is a symlink (root created where it pointed)
    db18 = os.path.join(tmp, "db18.jsonl")
    fifo = os.path.join(tmp, "plot-fifo")
    os.mkfifo(fifo)
    for plot_arg, why in ((fifo, "takes one config"), (os.path.join(tmp, "q" * 250 + ".png"), "File name too long")):
        p = run("tune", cfg_a, cfg_b, "--seq-len", "16", "--reps", "1", "--plot", plot_arg, "--db", db18)
        check(p.returncode == 2 and why in p.stderr and not os.path.exists(db18) and not p.stdout,
              f"tune --plot {plot_arg[-20:]} of two configs: exit {p.returncode}: {p.stderr[-200:]}")
    target = os.path.join(tmp, "lock-target")
    os.symlink(target, db18 + ".lock")
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", db18)
    check(p.returncode != 0 and not os.path.exists(target) and "symbolic link" in p.stderr,
          f"tune --db with <db>.lock a symlink: exit {p.returncode}, target {'MADE' if os.path.exists(target) else 'not made'}: "
          f"{p.stderr[-200:]}")

    # 17. a sweep interrupted (SIGINT, ^C) leaves nothing beside its CSV (it left a temp file
    # each time: helper-55), and the database as it was
    import signal
    import time
    idir = os.path.join(tmp, "interrupted")
    os.mkdir(idir)
    icsv, idb = os.path.join(idir, "i.csv"), os.path.join(idir, "i.jsonl")
    e = dict(os.environ)
    e["DILATTN_CACHE_DIR"] = os.path.join(idir, "kcache")  # (compiles: the sweep takes seconds)
    pr = subprocess.Popen([DILATTN, "tune", cfg_a, "--seq-len", "512", "--reps", "5", "-o", icsv, "--db", idb],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    time.sleep(1.5)
    pr.send_signal(signal.SIGINT)
    pr.communicate(timeout=120)
    left = [f for f in os.listdir(idir) if f != "kcache" and not f.endswith(".lock")]
    check(pr.returncode != 0 and left == [], f"tune interrupted: exit {pr.returncode}, left {left}")

    # 19. a bfloat16 config is swept like the others: its inputs are rounded to bf16 and the
    # reference reads the rounded values (no test tuned a bf16 config: a conversion that
    # rounded one way and checked against another made every candidate a correctness failure)
    cfg_bf = os.path.join(tmp, "bf16.json")
    json.dump({"segment_lengths": [32, 64], "dilation_rates": [1, 2], "num_heads": 2, "head_dim": 16,
               "dtype": "bfloat16", "causal": True}, open(cfg_bf, "w"))
    bf_csv, bf_db = os.path.join(tmp, "bf16.csv"), os.path.join(tmp, "bf16.jsonl")
    p = run("tune", cfg_bf, "--seq-len", "200", "--reps", "1", "--threads", "2", "-o", bf_csv, "--db", bf_db)
    try:
        summ = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        summ = {}
    rows_bf = list(csv.DictReader(open(bf_csv))) if os.path.exists(bf_csv) else []
    bad_bf = [(r["status"], r["label"]) for r in rows_bf if r["status"] != "ok"]
    check(p.returncode == 0 and summ.get("failed") == 0 and len(rows_bf) == summ.get("candidates") and rows_bf
          and not bad_bf, f"bf16 sweep: exit {p.returncode}, {summ}, failures {bad_bf[:3]}: {p.stderr.strip()[-300:]}")

    # 20. options the tuner refuses before anything is tuned: exit 2 naming the option, no
    # summary, no database and no CSV made
    folder = os.path.join(tmp, "a-folder")
    os.mkdir(folder)
    opt_db = os.path.join(tmp, "opt.jsonl")
    for extra, needle in ((["--colour", "1"], "unknown option or missing value: --colour"),
                          (["--backend", "gpu"], "--backend: 'gpu' is not auto, host or cuda"),
                          (["-o", folder], f"-o {folder}: is a folder"),
                          (["--plot", folder], f"--plot {folder}: is a folder"),
                          (["-o", os.path.join(tmp, "absent-dir", "x.csv")], "absent-dir does not exist"),
                          (["-o", os.path.join(cfg_b, "x.csv")], f"{cfg_b} is not a folder"),
                          (["--seq-len"], "unknown option or missing value: --seq-len"),
                          # an option given twice (the last was taken in silence)
                          (["--seq-len", "32"], "tune: --seq-len given twice (16 and 32)"),
                          (["--reps", "2"], "tune: --reps given twice (1 and 2)"),
                          (["--db", tmp + "/other.jsonl"], f"tune: --db given twice ({opt_db} and"),
                          (["--backend", "host", "--backend", "host"], "tune: --backend given twice"),
                          (["-o", tmp + "/x.csv", "-o", tmp + "/y.csv"], "tune: -o given twice"),
                          (["--plot", tmp + "/x.png", "--plot", tmp + "/y.png"], "tune: --plot given twice"),
                          (["--batch", "1", "--batch", "2"], "tune: --batch given twice (1 and 2)"),
                          (["--threads", "1", "--threads", "1"], "tune: --threads given twice")):
        for f in (opt_db, opt_db + ".lock"):
            if os.path.exists(f):
                os.remove(f)  # (a failure of one case leaves the next its own verdict)
        p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", opt_db, *extra)
        check(p.returncode == 2 and needle in p.stderr and not p.stdout and not os.path.exists(opt_db)
              and not os.path.exists(os.path.join(tmp, "absent-dir")),
              f"tune {extra}: exit {p.returncode}, db made {os.path.exists(opt_db)}, {p.stdout[:80]} {p.stderr.strip()[-200:]}")
    check(os.listdir(folder) == [], f"a refused tune wrote into {folder}: {os.listdir(folder)}")

    # 21. a database whose host records are of another C compiler but whose CUDA records
    # count here: the host records are left out with the warning that says so and names the
    # difference (plan.c's "records of a backend whose environment differs here"; only the
    # all-or-nothing warning of 4b was ever seen)
    mixed = os.path.join(tmp, "mixed.jsonl")
    header = json.loads(lines[0])
    header["env"]["cc"] = "another-cc"
    cuda_rec = dict(fast[0], backend="cuda")
    open(mixed, "w").write(json.dumps(header) + "\n" + "\n".join(json.dumps(r) for r in fast + [cuda_rec]) + "\n")
    p = run(*run_a, env={"DILATTN_TUNING_DB": mixed})
    info = json.loads(p.stdout) if p.returncode == 0 else {}
    check(p.returncode == 0 and (info.get("tile_q"), info.get("tile_k")) == (32, 64)
          and f"{len(fast)} records of a backend whose environment differs here" in p.stderr
          and "cc:" in p.stderr and "another-cc" in p.stderr and "another environment" not in p.stderr,
          f"host records of another CC beside CUDA records: exit {p.returncode}, {info}, {p.stderr.strip()}")

    # 22. (helper-60) databases concatenated (`cat ours theirs`): the records after the
    # second header are its environment's, not taken here (they were read as the first
    # header's: another machine's 0.001 ms record won), and tune refuses to merge into the
    # file (a merge wrote them all under one header)
    theirs_header = json.loads(lines[0])
    theirs_header["env"]["cpu"] = "Other CPU 9000"
    foreign = dict(rec_a, tile_q=8, tile_k=128, **fastest)
    cat = os.path.join(tmp, "cat.jsonl")
    open(cat, "w").write("\n".join([lines[0]] + lines[1:] + [json.dumps(theirs_header), json.dumps(foreign)]) + "\n")
    p = run(*run_a, env={"DILATTN_TUNING_DB": cat})
    info = json.loads(p.stdout) if p.returncode == 0 else {}
    check(p.returncode == 0 and (info.get("tile_q"), info.get("tile_k")) != (8, 128),
          f"another machine's record after a second header: taken {info} {p.stderr.strip()}")
    before = open(cat).read()
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", cat)
    check(p.returncode == 2 and "environment headers" in p.stderr and open(cat).read() == before,
          f"tune into concatenated databases: exit {p.returncode}, changed {open(cat).read() != before}: {p.stderr.strip()[-300:]}")
    # ... and where the second header is this machine's, its records count
    ours2 = os.path.join(tmp, "cat2.jsonl")
    open(ours2, "w").write("\n".join([json.dumps(theirs_header), lines[0], json.dumps(foreign)]) + "\n")
    p = run(*run_a, env={"DILATTN_TUNING_DB": ours2})
    info = json.loads(p.stdout) if p.returncode == 0 else {}
    check(p.returncode == 0 and (info.get("tile_q"), info.get("tile_k")) == (8, 128),
          f"this machine's records after a foreign header: not taken {info} {p.stderr.strip()}")

    # 23. (helper-60) the nearest bucket: of two as near, the larger, whatever the file's
    # order (it flipped with a re-sweep's order); tunables that failed at any bucket are not
    # taken at another
    at = lambda n, tq, tk, **kw: dict(rec_a, seq_len=n, bucket=n.bit_length() - 1, tile_q=tq, tile_k=tk, **dict(fastest, **kw))
    # (run_a runs N = 300: bucket 8; records at buckets 7 and 9 are as near)
    for order in (0, 1):
        recs2 = [at(128, 8, 16), at(512, 16, 32)]
        path = db_with(*(recs2 if order else recs2[::-1]))
        rc, info = run_info(path)
        check(rc == 0 and (info["tile_q"], info["tile_k"]) == (16, 32),
              f"buckets 7 and 9 for N = 300, order {order}: {info}")
    ran_out = dict(at(1024, 16, 32), status="runtime", median_ms=-1, min_ms=-1, max_ms=-1, reps=0)
    rc, info = run_info(db_with(at(256, 16, 32), at(256, 8, 16, median_ms=0.5, min_ms=0.5, max_ms=0.5), ran_out))
    check(rc == 0 and (info["tile_q"], info["tile_k"]) == (16, 32),
          f"tunables that failed at run time at another length (that length's): not taken {info}")
    failed = dict(at(1024, 16, 32), status="correctness", median_ms=-1, min_ms=-1, max_ms=-1, reps=0)
    rc, info = run_info(db_with(at(256, 16, 32), at(256, 8, 16, median_ms=0.5, min_ms=0.5, max_ms=0.5), failed))
    check(rc == 0 and (info["tile_q"], info["tile_k"]) == (8, 16),
          f"tunables that failed their check at another length taken: {info}")

    # 23a. (helper-60) the lines a merge cannot read (damaged, hand-edited, a newer tuner's)
    # are kept as they are, not deleted
    keep = os.path.join(tmp, "keep.jsonl")
    newer = json.dumps(dict(rec_a, cuda_mma=99, extra="a newer tuner's field"))
    open(keep, "w").write("\n".join([lines[0]] + lines[1:] + [newer, "with a \0 NUL", "not json at all"]) + "\n")
    p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", keep)
    after = open(keep).read().splitlines()
    check(p.returncode == 0 and newer in after and "not json at all" in after and "with a \0 NUL" in after
          and len(after) > len(lines) + 3,
          f"a merge into a database with lines it cannot read: exit {p.returncode}, kept {newer in after} "
          f"{'not json at all' in after}: {p.stderr.strip()[-200:]}")

    # 23b. (helper-60) a CC past the header's field is its hash there, not cut: a sweep under
    # 'cc <130 spaces> -O0' served plans under '... -O3' without a word
    long_cc = "cc" + " " * 130
    ccdb = os.path.join(tmp, "long-cc.jsonl")
    p = run("tune", cfg_a, "--seq-len", "256", "--reps", "1", "--db", ccdb, env={"CC": long_cc + "-O0"})
    hdr = json.loads(open(ccdb).readline()) if p.returncode == 0 else {}
    p2 = run(*run_a, env={"DILATTN_TUNING_DB": ccdb, "CC": long_cc + "-O3"})
    check(p.returncode == 0 and hdr.get("env", {}).get("cc", "").startswith("sha256:") and p2.returncode == 0
          and "another environment" in p2.stderr, f"a long CC: header {hdr}, run: {p2.stderr.strip()[-300:]}")
    # ... and a tab in CC (words may be split by tabs): the header stays JSON (it was written raw,
    # and every later read and merge of the database failed)
    tabdb = os.path.join(tmp, "tab-cc.jsonl")
    runs_tab = [run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", tabdb, env={"CC": "cc\t-O2"})
                for _ in range(2)]
    check(all(q.returncode == 0 for q in runs_tab) and json.loads(open(tabdb).readline())["env"]["cc"].startswith("sha256:"),
          f"CC with a tab: exits {[q.returncode for q in runs_tab]}: {runs_tab[1].stderr.strip()[-300:]}")

    # 24. (helper-60) a <db>.lock that cannot be opened (a folder, a link) is found before
    # the sweep, not after it (its records were lost, the summary named the database)
    for kind in ("folder", "link"):
        ldb = os.path.join(tmp, f"lock-{kind}.jsonl")
        if kind == "folder":
            os.mkdir(ldb + ".lock")
        else:
            os.symlink(os.path.join(tmp, "nowhere"), ldb + ".lock")
        p = run("tune", cfg_b, "--seq-len", "16", "--reps", "1", "--db", ldb)
        check(p.returncode == 2 and ".lock" in p.stderr and not p.stdout and not os.path.exists(ldb),
              f"tune with {ldb}.lock a {kind}: exit {p.returncode}, {p.stdout[:100]} {p.stderr.strip()[-200:]}")

finally:
    shutil.rmtree(tmp, ignore_errors=True)

report()
