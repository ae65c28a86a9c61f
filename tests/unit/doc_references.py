#!/usr/bin/env python3
"""Every repository path the docs and the file-header comments name exists.

Checked: the backticked spans and relative links of docs/*.md and every README.md, and the first
comment block of every source file (its backticked spans and its bare paths). A path is a token
with a '/' that begins at a top folder of the repository (`src/`, `tests/`, `docs/`, ...) or,
file-like (`coll/ring.cc`), at the naming file's folder, its parents or `src/`; a bare file name
(`ring.cc`) must be some file's name in the tree. Brace forms (`exchange.{h,cc}`), globs
(`real_api.*`) and line suffixes (`ring.cc:617`) are understood. A backticked `file.cc:name`
(a function, type or variable) must name something the file contains.

Usage: doc_references.py SOURCE_ROOT   (exit 1 and one line per stale reference when any)
"""
import glob
import os
import re
import subprocess
import sys

ROOTS = ("src", "tests", "docs", "perf", "kernels", "transport", "include", "tools", "python",
         "cudaemu", "compat", "jax", "meson")
SOURCE_EXT = (".h", ".cc", ".cu", ".cuh", ".c", ".def", ".inc", ".py", ".sh", ".in")
FILE_EXT = SOURCE_EXT + (".md", ".build", ".txt", ".json", ".npy", ".supp", ".gp")
# Names of other projects' files and of generated or installed files, never in this tree.
EXTERNAL = {
    "nccl.h", "nccl_net.h", "cuda.h", "cuda_runtime.h", "cuda_runtime_api.h", "ucp.h",
    "info.h", "enqueue.cc", "collectives.cc", "all_reduce.h", "reduce_scatter.h",
    "primitives.h", "prims_simple.h", "proto.h", "proto.c", "eager_single.c", "common.h",
    "common.cu", "all_gather.cu", "reduce_scatter.cu", "sketchccl_build_config.h",
    "meson_options.txt", "compile_commands.json", "testlog.txt", "setup.py", "train.py",
    "nvcc.profile", "stdatomic.h", "nvToolsExt.h", "cub.cuh", "cuda_fp16.h", "cuda_bf16.h",
    "cuda_fp8.h", "x.cu.cc",
}
# Other projects' names (NCCL, UCX, CUDA, PyTorch, glibc, the ELF loader, Linux) and math, cited in
# backticks: not in this tree.
EXTERNAL_NAMES = {
    "sm_80", "empty_cache", "uct_tcp_ep_handle_send_err", "uct_tcp_ep_purge", "ExecDestroy",
    "__atomic", "_start", "cuda_", "__cxa_thread_atexit_impl", "x_i", "initTransportsRank",
    "getHostHash", "ProcessGroupNCCL", "ibv_reg_mr", "_8q", "runRing", "taskAppend",
    "ncclEnqueueCheck", "ncclInfo", "testColl", "cuMemExportToShareableHandle",
    "cudaFuncSetAttribute", "ncclCommEnsureReady", "ncclAsyncLaunch", "envConfigOverride",
    "waitReady", "split_comm", "uct_tcp_ep_sendv", "ncclNet_t", "getProperties", "main_arena",
    "tcp_retries2",
}
# Other projects' files cited by their own paths (NCCL, UCX, XLA).
EXTERNAL_PATHS = {
    "src/init.cc", "src/group.cc", "src/misc/utils.cc", "src/uct/tcp/tcp_ep.c",
    "xla/tsl/cuda/nccl_stub.cc", "site-packages/nvidia/nccl/include",
    "site-packages/nvidia/nccl/lib",
}

PATH_TOKEN = re.compile(r"[A-Za-z0-9_.*{},/+-]*/[A-Za-z0-9_.*{},/+-]*")
BARE_FILE = re.compile(r"^[A-Za-z0-9_+-]+(\.[A-Za-z0-9_]+)+$")
FILE_AND_NAME = re.compile(r"^([A-Za-z0-9_/.-]+\.(?:h|cc|cu|cuh|def|inc|py|sh)):([A-Za-z_]\w*)$")


def expand_braces(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(token[:m.start()] + alt + token[m.end():])
    return out


def exists(root, rel):
    """A file or folder, a glob's match, a stem (`coll/ring` for ring.{h,cc}) or a program the
    folder's meson.build builds (`perf/bench/sketchccl-perf`)."""
    full = os.path.join(root, rel)
    if any(ch in rel for ch in "*?["):
        return bool(glob.glob(full))
    if os.path.exists(full) or glob.glob(glob.escape(full) + ".*"):
        return True
    build_file = os.path.join(os.path.dirname(full), "meson.build")
    if os.path.isfile(build_file):
        with open(build_file, encoding="utf-8") as f:
            return os.path.basename(rel) in f.read()
    return False


class Checker:
    def __init__(self, root):
        self.root = root
        listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
        if listed.returncode == 0:
            files = listed.stdout.split()
        else:  # not a clone (a release tarball): the tree less build folders and hidden ones
            files = []
            for d, dirs, names in os.walk(root):
                dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
                files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        # Deleted in the work tree but not yet in the index: not there.
        self.files = [f for f in files if os.path.exists(os.path.join(root, f))]
        self.basenames = {os.path.basename(f) for f in self.files}
        self.src_folders = {f.split("/")[1] for f in self.files
                            if f.startswith("src/") and f.count("/") >= 2}
        self.problems = []
        # Every identifier of the code, the build files and the tests' names ('unit_' + name).
        self.names = set()
        for rel in self.files:
            if rel.endswith(".md"):
                continue
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
            # Less the comments, roughly: a comment that cites a name does not define it.
            if rel.endswith((".py", ".sh", ".build", ".in", ".txt")):
                text = re.sub(r"(?m)^\s*#.*$", "", text)
            else:
                text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
                text = re.sub(r"(?m)^\s*//.*$|\s//\s.*$", "", text)
            self.names.update(re.findall(r"\w+", text))

    def report(self, where, what):
        self.problems.append("%s: %s" % (where, what))

    def candidates(self, token, src_dir):
        """Folders a relative path may start from, nearest first."""
        bases, d = [], src_dir
        while True:
            bases.append(d)
            if not d:
                break
            d = os.path.dirname(d)
        bases += [os.path.join(b, "include") for b in bases if b]  # cudaemu/include/...
        return bases + ["", "src", "include"]

    def check_path(self, where, token, src_dir, strict):
        token = re.sub(r":[0-9][0-9,-]*$", "", token).rstrip(".,;:)")
        token = token.split("#")[0]
        if not token or "://" in token or token.startswith(("/", "$", "~")):
            return
        first = token.split("/")[0]
        if first.isupper() or first.rstrip("*") == "":  # a placeholder: OUT/, DIR/
            return
        # Rooted: a top folder, or a folder of src/ (`interpose/policy`).
        rooted = first in ROOTS or first in self.src_folders
        for alt in expand_braces(token):
            file_like = os.path.splitext(alt.rstrip("/"))[1] in FILE_EXT
            if not rooted and not (strict and file_like):
                continue
            if os.path.basename(alt) in EXTERNAL or alt.rstrip("/") in EXTERNAL_PATHS:
                continue
            if not any(exists(self.root, os.path.join(b, alt)) for b in self.candidates(alt, src_dir)):
                self.report(where, "`%s` does not exist" % alt)

    def check_bare(self, where, token):
        token = re.sub(r":[0-9][0-9,-]*$", "", token)
        if not BARE_FILE.match(token) or os.path.splitext(token)[1] not in SOURCE_EXT:
            return
        if token in EXTERNAL or token.startswith("lib"):
            return
        for alt in expand_braces(token):
            if alt not in self.basenames:
                self.report(where, "no file is named `%s`" % alt)

    def check_file_and_name(self, where, token, src_dir):
        m = FILE_AND_NAME.match(token)
        if not m:
            return
        path, name = m.groups()
        for base in self.candidates(path, src_dir):
            full = os.path.join(self.root, base, path)
            if os.path.isfile(full):
                break
        else:
            matches = [f for f in self.files if f.endswith("/" + path) or f == path]
            if len(matches) != 1:
                return  # the path check reports a missing file
            full = os.path.join(self.root, matches[0])
        with open(full, encoding="utf-8", errors="replace") as f:
            if not re.search(r"\b%s\b" % re.escape(name), f.read()):
                self.report(where, "`%s` does not contain `%s`" % (path, name))

    def check_name(self, where, span):
        """A backticked function, type or test name (`snake_case`, `camelCase`, `A::b`, `f()`)."""
        m = re.match(r"^(~?[A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)*)(\(\))?$", span)
        if not m:
            return
        parts = [p.lstrip("~") for p in m.group(1).split("::")]
        last = parts[-1]
        if last.isupper() and not last.startswith(("SKETCHCCL_", "SCCL_")):
            return  # an environment variable or constant of another project
        if not (m.group(2) or len(parts) > 1 or "_" in last.strip("_")
                or re.search(r"[a-z][A-Z]", last)):
            return  # a plain word
        for part in parts:
            if part in self.names or part in EXTERNAL_NAMES:
                continue
            # A test's name ('unit_' + its row), an export made by a macro (p##name).
            made = re.sub(r"^(unit|fuzz)_|^p(?=nccl)", "", part)
            if made != part and made in self.names:
                continue
            self.report(where, "nothing in the code is named `%s`" % part)

    def check_span(self, where, span, src_dir):
        span = span.strip()
        # A span with spaces is a command or an expression: only its rooted paths count.
        if " " not in span:
            self.check_name(where, span)
            self.check_file_and_name(where, span, src_dir)
            if "/" not in span:
                self.check_bare(where, span)
        for tok in PATH_TOKEN.findall(span):
            if " " not in span:
                self.check_path(where, tok, src_dir, strict=True)
            elif tok.split("/")[0] in ROOTS:
                self.check_path(where, tok, src_dir, strict=False)

    def check_markdown(self, rel):
        src_dir = os.path.dirname(rel)
        with open(os.path.join(self.root, rel), encoding="utf-8") as f:
            text = f.read()
        for lineno, line in enumerate(text.splitlines(), 1):
            where = "%s:%d" % (rel, lineno)
            if line.startswith("```"):
                continue
            for span in re.findall(r"`([^`]+)`", line):
                self.check_span(where, span, src_dir)
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                target = target.split("#")[0]
                if not target or "://" in target or target.startswith("mailto:"):
                    continue
                if not os.path.exists(os.path.join(self.root, src_dir, target)):
                    self.report(where, "link target `%s` does not exist" % target)

    def header_comment(self, rel):
        with open(os.path.join(self.root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        out, i = [], 0
        if lines and lines[0].startswith("#!"):
            i = 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i < len(lines) and lines[i].lstrip().startswith("/*"):
            while i < len(lines):
                out.append((i + 1, lines[i]))
                if "*/" in lines[i]:
                    break
                i += 1
            return out
        if rel.endswith(".py") and i < len(lines) and lines[i].startswith(('"""', "'''")):
            quote = lines[i][:3]
            out.append((i + 1, lines[i]))
            if lines[i].count(quote) < 2:
                i += 1
                while i < len(lines):
                    out.append((i + 1, lines[i]))
                    if quote in lines[i]:
                        break
                    i += 1
            return out
        marker = "#" if rel.endswith((".py", ".sh", ".build", ".in")) else "//"
        while i < len(lines) and lines[i].lstrip().startswith(marker):
            out.append((i + 1, lines[i]))
            i += 1
        return out

    def check_source(self, rel):
        src_dir = os.path.dirname(rel)
        for lineno, line in self.header_comment(rel):
            where = "%s:%d" % (rel, lineno)
            spans = re.findall(r"`([^`]+)`", line)
            for span in spans:
                self.check_span(where, span, src_dir)
            bare = re.sub(r"`[^`]+`", " ", line)
            for tok in PATH_TOKEN.findall(bare):
                self.check_path(where, tok, src_dir, strict=True)

    def run(self):
        for rel in self.files:
            if rel.endswith(".md") and (rel.startswith("docs/") and rel.count("/") == 1
                                        or os.path.basename(rel) == "README.md"):
                self.check_markdown(rel)
            elif rel.endswith(SOURCE_EXT) or os.path.basename(rel) == "meson.build":
                self.check_source(rel)
        return self.problems


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    problems = Checker(sys.argv[1]).run()
    for p in problems:
        print(p)
    print("%d stale references" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
