#!/usr/bin/env python3
"""Checks libsketchccl.so's exports against NCCL's own list of host functions, from outside.

NCCL 2.32's functions are those the nccl.h built against declares (NCCL's own header, 2.28.9
here) plus those added since (nccl_functions_2_29_to_2_32.txt, from NCCL's headers and notes).
Each must be exported as ncclX and pncclX at one address, and have a row in nccl_api.def whose
`since` is the release that added it.

  check_exports.py LIBSKETCHCCL NCCL_H ADDED_LIST NCCL_API_DEF
"""
import re
import subprocess
import sys


def header_functions(path):
    text = open(path).read()
    # Declarations of the public API: a return type, then ncclX( (pncclX are NCCL's twins).
    decl = re.compile(r"^\s*(?:ncclResult_t|const char\s*\*|void)\s+(nccl\w+)\s*\(", re.M)
    return set(decl.findall(text))


def added_functions(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            name, since = line.split()
            out[name] = int(since)
    return out


def table_rows(path):
    row = re.compile(r"^SCCL_NCCL_(?:FN|VOID|VOID_NO_TWIN)\((\w+), (\d+),|"
                     r"^SCCL_NCCL_(?:COLL|COLL_CONFIG)\((\w+), \w+, (\d+),|"
                     r"^SCCL_NCCL_VALUE\([^,]+, (\w+), (\d+),", re.M)
    rows = {}
    for m in row.finditer(open(path).read()):
        g = [x for x in m.groups() if x is not None]
        rows[g[0]] = int(g[1])
    return rows


def exports(lib):
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                        text=True).stdout
    out = {}
    for line in nm.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out[parts[2]] = parts[0]
    return out


def main():
    lib, nccl_h, added_list, table = sys.argv[1:5]
    base = header_functions(nccl_h)
    added = added_functions(added_list)
    rows = table_rows(table)
    syms = exports(lib)
    failures = []
    overlap = base & set(added)
    if overlap:
        # A newer nccl.h: what it declares needs no list, the list's versions still hold.
        base -= overlap
    names = sorted(base | set(added))
    if not base or len(names) < 73:
        failures.append("expected NCCL 2.32's 73 functions, got %d (header %s: %d)" %
                        (len(names), nccl_h, len(base)))
    for name in names:
        for sym in (name, "p" + name):
            if sym not in syms:
                failures.append("not exported: " + sym)
        if name in syms and "p" + name in syms and syms[name] != syms["p" + name]:
            failures.append("%s and p%s differ in address" % (name, name))
        if name not in rows:
            failures.append("no row in nccl_api.def: " + name)
        elif name in added and rows[name] != added[name]:
            failures.append("%s: nccl_api.def says since %d, NCCL added it in %d" %
                            (name, rows[name], added[name]))
    for f in failures:
        print("FAIL " + f)
    print("%d NCCL functions checked (%d from %s, %d added since), %d failures" %
          (len(names), len(base), nccl_h, len(added), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
