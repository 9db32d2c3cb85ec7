#!/usr/bin/env python3
"""The size limits of ps/ and worker/ (docs/architecture.md, "Sizes"), checked.

Lists every ps/**/*.cc and worker/**/*.cc file of 450 lines or more (the backends' kernels,
worker/cpu/cpu_backend.cc and worker/cuda/**, aside), ps/server.cc over 300, and every function in ps/ and worker/
(.cc, .h, .cu, .cuh) longer than 60 lines, from the line of its name to its closing brace (flag
tables, Boost.Program_options' add_options() chains, aside). Prints file:line, what, length;
exits 1 when anything is listed, 0 when nothing is.

The function scan is a brace matcher, not a parser: comments, strings and preprocessor lines
are blanked, then every brace block at namespace or class scope whose header has a parameter
list is a function (a constructor's braced member initialisers are not its body).

Usage: tools/code_sizes.py [REPO_ROOT]   (default: the repository this file is in)
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 450  # a file must stay under this
LOOP_FILE_LINES = {"ps/server.cc": 300}  # the PS's loop: at most this (a feature adds a service)
MAX_FUNCTION_LINES = 60  # a function may have this many
ROOMS = ("ps", "worker")
KERNELS = ("worker/cpu/cpu_backend.cc", "worker/cuda/")
SOURCES = (".cc", ".h", ".cu", ".cuh")


def blank_non_code(text):
    """text with comments, string and character literals and preprocessor lines blanked (newlines
    kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#" or (line_start and c in " \t" and text[i:].lstrip(" \t").startswith("#")):
            # a preprocessor line, with its continuations
            while i < n:
                if text[i] == "\n" and text[i - 1] != "\\":
                    break
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        raw = re.match(r'R"([^(\s]*)\(', text[i:i + 20]) if c == "R" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if raw:
            end = text.find(")" + raw.group(1) + '"', i)
            end = n if end < 0 else end + len(raw.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
            out.append(" ")  # a digit separator: 1'000'000
            i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n - 1) - i - 1) + c)
            i = j + 1
            continue
        out.append(c)
        line_start = c == "\n" or (line_start and c in " \t")
        i += 1
    return "".join(out)


def matching_brace(code, i):
    """The index of the brace closing the one at i."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


SCOPE = re.compile(r"\b(namespace|class|struct|union)\b|^\s*extern\s*$")
TEMPLATE = re.compile(r"\btemplate\s*<[^{};]*?>\s*")


def top_level_paren(header):
    """The index of the first '(' outside <...>, or -1."""
    angle = 0
    for k, ch in enumerate(header):
        if ch == "<":
            angle += 1
        elif ch == ">" and angle > 0:
            angle -= 1
        elif ch == "(" and angle == 0:
            return k
    return -1


def functions(code):
    """(start_offset, end_offset, name) of every function defined at namespace or class scope."""
    found = []

    def scan(begin, end):
        header_start = begin
        i = begin
        while i < end:
            c = code[i]
            if c in ";}":
                header_start = i + 1
            elif c == "{":
                header = TEMPLATE.sub("", code[header_start:i])
                paren = top_level_paren(header)
                if paren < 0 and SCOPE.search(header):
                    close = matching_brace(code, i)
                    if not re.search(r"\benum\b", header):
                        scan(i + 1, close)
                    i = close
                    header_start = i + 1
                elif paren < 0 or "=" in header[:paren] or re.search(r"\benum\b", header[:paren]):
                    i = matching_brace(code, i)  # an initialiser, an enum
                elif is_member_initialiser(header, paren, code, i):
                    i = matching_brace(code, i)
                else:
                    close = matching_brace(code, i)
                    name = header[:paren].split()[-1] if header[:paren].split() else "?"
                    name_at = header_start + len(code[header_start:i]) - len(code[header_start:i].lstrip())
                    found.append((name_at, close, name, code[header_start:close]))
                    i = close
                    header_start = i + 1
            i += 1

    scan(0, len(code))
    return found


def is_member_initialiser(header, paren, code, brace):
    """Whether the '{' at brace opens a constructor's braced member initialiser (a_{x}), not its
    body: after the parameter list's ')' a ':' starts an initialiser list, and the brace follows
    a name."""
    depth, k = 0, paren
    while k < len(header):
        if header[k] == "(":
            depth += 1
        elif header[k] == ")":
            depth -= 1
            if depth == 0:
                break
        k += 1
    rest = header[k + 1:]
    if not re.search(r"(?<!:):(?!:)", rest):
        return False
    before = code[:brace].rstrip()
    return bool(before) and (before[-1].isalnum() or before[-1] in "_>")


def line_of(code, offset):
    return code.count("\n", 0, offset) + 1


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = []
    for room in ROOMS:
        for path in sorted((root / room).rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8", errors="replace")
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            kernel = any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in KERNELS)
            if path.suffix == ".cc" and not kernel and lines >= MAX_FILE_LINES:
                problems.append(f"{rel}:1: file, {lines} lines (limit: under {MAX_FILE_LINES})")
            if str(rel) in LOOP_FILE_LINES and lines > LOOP_FILE_LINES[str(rel)]:
                problems.append(f"{rel}:1: file, {lines} lines (limit: {LOOP_FILE_LINES[str(rel)]}, the loop alone)")
            code = blank_non_code(text)
            for start, end, name, body in functions(code):
                length = line_of(code, end) - line_of(code, start) + 1
                if length > MAX_FUNCTION_LINES and "add_options()" not in body:
                    problems.append(f"{rel}:{line_of(code, start)}: {name}, {length} lines "
                                    f"(limit: {MAX_FUNCTION_LINES})")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
