#!/usr/bin/env python3
"""test_sass_walk.py - bench/sass_walk.py on a hand-written SASS listing: the loop it finds,
the instructions on the paths that each choice of branches gives, and its refusals.
Run: python3 tests/test_sass_walk.py BENCH_DIR   (ctest -R sass_walk)"""
import json
import os
import subprocess
import sys
import tempfile

from checks import check, report

LISTING = """\
        code for sm_90
                Function : da_fwd_example
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x0000000000 */
        /*0010*/                   S2R R0, SR_TID.X ;                     /* 0x0000000000 */
        /*0020*/                   ISETP.GE.AND P0, PT, R0, 0x10, PT ;    /* 0x0000000000 */
        /*0030*/                   LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64] ; /* 0x00 */
        /*0040*/                   IADD3 R2, R2, 0x10, RZ ;              /* 0x0000000000 */
        /*0050*/              @!P0 BRA 0x30 ;                             /* 0x0000000000 */
        /*0060*/              @P1 BRA 0xa0 ;                              /* 0x0000000000 */
        /*0070*/                   FSEL R8, R8, -INF , P2 ;               /* 0x0000000000 */
        /*0080*/                   FSEL R9, R9, -INF , P2 ;               /* 0x0000000000 */
        /*0090*/                   FSEL R10, R10, -INF , P2 ;             /* 0x0000000000 */
        /*00a0*/                   HMMA.16816.F32 R12, R4, R6, R12 ;      /* 0x0000000000 */
        /*00b0*/                   HMMA.16816.F32 R16, R4, R7, R16 ;      /* 0x0000000000 */
        /*00c0*/              @P3 BRA 0x0 ;                               /* 0x0000000000 */
        /*00d0*/                   EXIT ;                                 /* 0x0000000000 */
        /*00e0*/                   BRA 0xe0;                              /* 0x0000000000 */
"""

def run(tool, *args):
    r = subprocess.run([sys.executable, tool, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def main():
    tool = os.path.join(sys.argv[1], "sass_walk.py")
    with tempfile.TemporaryDirectory() as d:
        sass = os.path.join(d, "k.sass")
        with open(sass, "w") as f:
            f.write(LISTING)
        rc, out, _ = run(tool, sass, "--loops")
        loops = json.loads(out) if rc == 0 else []
        check(rc == 0 and len(loops) == 1, f"--loops: one loop with mma, got {out!r}")
        if loops:
            check(loops[0]["start"] == "0x0" and loops[0]["end"] == "0xc0" and loops[0]["mma"] == 2,
                  f"--loops: 0x0..0xc0 with 2 mma, got {loops[0]}")
        # the default path: the copy loop once, the masked block run (branch at 0x60 not taken)
        rc, out, err = run(tool, sass, "0", "c0")
        got = json.loads(out) if rc == 0 else {}
        check(got.get("instructions") == 13 and got.get("mma") == 2, f"default path: 13 instructions, got {got}")
        check("0x50" in err and "0x60" in err and "would skip 3" in err, f"default branches listed: {err!r}")
        # copy loop taken twice (three copies), mask block skipped: 3 + 3 * 3 + 1 + 3 = 16
        rc, out, _ = run(tool, sass, "0", "c0", "50=2", "60=T")
        got = json.loads(out) if rc == 0 else {}
        check(got.get("instructions") == 16, f"decisions 50=2 60=T: 16 instructions, got {got}")
        check(got.get("opcodes", {}).get("LDGSTS") == 3 and "FSEL" not in got.get("opcodes", {}),
              f"three copies, no FSEL on the path: {got.get('opcodes')}")
        rc, _, _ = run(tool, sass, "8", "c0")
        check(rc != 0, "a START that is no instruction address is refused")
    report()


if __name__ == "__main__":
    main()
