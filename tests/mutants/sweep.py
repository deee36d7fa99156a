#!/usr/bin/env python3
"""tests/mutants/sweep.py: `make mutants-sweep`, a mutation sweep of PPS's checkers.

The curated mutants (tests/mutants/*.patch, run.sh) are the bugs someone thought of;
this finds the ones nobody did. Given C files and a test command it generates every
single-point mutant by fixed rules, plants each one alone in a scratch copy of the tree
(copy.sh: under the build tree, never the source tree), rebuilds what it touches, runs
the test command with a timeout and records whether the tests noticed:

  rules  rel       < <=, <= <, > >=, >= >, == !=, != ==
         logic     && ||, || &&
         arith     binary + -, - + (not ++ -- -> += -=, not unary minus)
         const     decimal integer constants 0 -> 1, 1 -> 0, n -> n+1 (not array
                   sizes in declarations, not floating constants)
         if-not    if (c) -> if (!(c))
         del-incr, del-break, del-continue, del-call
                   the statement `x++;` / `break;` / `continue;` / a call whose result
                   is ignored, replaced by `;`
  Comments, string and character literals and preprocessor lines are never mutated.

  outcome  killed        the build passed and the test command failed
           survived      the test command passed with the mutant in place
           timeout       the test command ran past --timeout (default: 3 x the
                         unmutated run + 10 s)
           build-failed  the mutant does not compile (the rule made invalid C)

A survivor listed in tests/mutants/equivalent.tsv (file, rule, original line, mutated
line, why no input can tell them apart; tab-separated) is counted as equivalent.

Usage (from the build directory; `make mutants-sweep` runs the plan sweep.plan):
  sweep.py [options] FILE[:LO-HI]... --test CMD
  sweep.py [options] --plan PLAN [NAME...]
Options: --lines LO-HI (every FILE), --sample N --seed S (N mutants drawn with seed S,
run in id order), --only ID,ID,... (those mutant ids; results under WORK/NAME-only, the
full run's stay), --survivors (--only the last full run's survivors: after adding tests),
--report (the last full run's counts, and with a later --only run's outcomes, what
survives now; runs nothing), --list (print the mutants, run nothing), --timeout SEC, --build CMD (default `nice -n 10 make -j1`), --work DIR
(default BUILDDIR/mutants-sweep), --fresh (copy the tree again), --srcdir/--builddir.
The test command runs in the copy's build directory (sh -c), with top_srcdir and
top_builddir set to the copy. Output per sweep: WORK/NAME/results.tsv (every mutant:
id, file, line, rule, original, mutated, outcome, seconds), WORK/NAME/summary.txt and,
per mutant, its test log under WORK/NAME/logs/. Mutant ids are the positions in the
list of FILE's mutants within the line range, so the same command names the same
mutants while the source is unchanged.

Safety: the mutant is written only into the copy (a plain file, checked not to be the
source file or a link to it); the original text is written back after each mutant, on
Ctrl-C, SIGTERM or an exception (a finally block); a marker file names a mutated file
until it is restored, and each start re-syncs the copy's sources with the source tree
(content compared), so even a killed sweep leaves nothing mutated behind. Stdlib only.
"""
import argparse, fcntl, os, random, re, shlex, signal, subprocess, sys, time

KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while",
    "_Bool", "_Static_assert", "__attribute__", "__typeof__", "typeof", "_Alignof", "alignof",
}
DECL_START = {"char", "const", "double", "float", "int", "long", "short", "signed", "static", "struct", "enum",
              "unsigned", "typedef", "size_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t",
              "uint16_t", "uint32_t", "uint64_t", "bool", "_Bool"}
TOKEN = re.compile(r"""
  (?P<num>(?:0[xX][0-9a-fA-F.]+(?:[pP][+-]?\d+)?|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfF]*)
 |(?P<id>[A-Za-z_]\w*)
 |(?P<op><<=|>>=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|\.\.\.|[-+*/%<>=!&|^~?:;,.(){}\[\]])
 |(?P<ws>\s+)
""", re.X)
REL = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
LOGIC = {"&&": "||", "||": "&&"}
ARITH = {"+": "-", "-": "+"}
CONTROL = {"if", "for", "while", "switch"}


def mask(text):
    """text with comments, string and char literals and preprocessor lines blanked
    (same length, newlines kept): what the rules may look at."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True
    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":
                j += 2 if text[j] == "\\" and j + 1 < n else 1
            blank(i, j)
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, min(j + 1, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def tokens(text):
    """(kind, text, start, end) of the code tokens of text (after mask)."""
    m = mask(text)
    toks, i, n = [], 0, len(m)
    while i < n:
        t = TOKEN.match(m, i)
        if not t:
            i += 1
            continue
        if t.lastgroup != "ws":
            toks.append((t.lastgroup, t.group(), t.start(), t.end()))
        i = t.end()
    return toks


class Mutant:
    __slots__ = ("file", "line", "rule", "start", "end", "repl", "id", "orig_line", "mut_line")

    def __init__(self, file, rule, start, end, repl):
        self.file, self.rule, self.start, self.end, self.repl = file, rule, start, end, repl


def generate(path, rel, text):
    """Every mutant of one file, in text order (then rule order)."""
    toks = tokens(text)
    n = len(toks)
    out = []
    # matching brackets, paren depth, whether a '(' belongs to a control statement
    match, depth, stack = {}, [0] * n, []
    ctl_close = set()
    d = 0
    for i, (k, t, s, e) in enumerate(toks):
        depth[i] = d
        if t in "([{" and k == "op":
            stack.append(i)
            if t == "(":
                d += 1
        elif t in ")]}" and k == "op" and stack:
            j = stack.pop()
            match[j], match[i] = i, j
            if t == ")":
                d -= 1
                if j > 0 and toks[j - 1][1] in CONTROL:
                    ctl_close.add(i)
    # statements: where each starts, and whether it is a declaration
    def stmt_start(i):
        if depth[i] != 0:
            return False
        if i == 0:
            return True
        p = toks[i - 1][1]
        if p in (";", "{", "}", "else") or (i - 1) in ctl_close:
            return True
        if p == ":":   # after `case X:`, `default:` or a label
            j = i - 2
            while j >= 0 and toks[j][1] not in (";", "{", "}"):
                j -= 1
            return toks[j + 1][1] in ("case", "default") or j + 3 == i
        return False
    decl = [False] * n
    cur = False
    for i in range(n):
        if stmt_start(i):
            cur = toks[i][1] in DECL_START
        decl[i] = cur
    def add(rule, s, e, repl):
        out.append(Mutant(rel, rule, s, e, repl))
    for i, (k, t, s, e) in enumerate(toks):
        prev = toks[i - 1] if i else ("op", ";", 0, 0)
        nxt = toks[i + 1] if i + 1 < n else ("op", ";", 0, 0)
        if k == "op" and t in REL:
            add("rel", s, e, REL[t])
        elif k == "op" and t in LOGIC:
            add("logic", s, e, LOGIC[t])
        elif k == "op" and t in ARITH:
            binary = (prev[0] == "num" or (prev[0] == "id" and prev[1] not in KEYWORDS) or prev[1] in (")", "]"))
            if binary:
                add("arith", s, e, ARITH[t])
        elif k == "num" and re.fullmatch(r"(0|[1-9]\d*)[uUlL]*", t):
            if prev[1] == "[" and nxt[1] == "]" and decl[i]:
                continue   # an array size in a declaration
            if prev[1] == "-" and i > 1 and toks[i - 2][1] == "e":
                continue
            digits = re.match(r"\d+", t).group()
            suf = t[len(digits):]
            v = int(digits)
            add("const", s, e, ("1" if v == 0 else "0" if v == 1 else str(v + 1)) + suf)
        elif k == "id" and t == "if" and nxt[1] == "(" and (i + 1) in match:
            c = match[i + 1]
            a, b = toks[i + 1][3], toks[c][2]
            add("if-not", a, b, "!(" + text[a:b] + ")")
        if stmt_start(i):
            # the statement's tokens up to its ';' (no braces, at depth 0)
            j = i
            while j < n and toks[j][1] not in (";", "{", "}"):
                j += 1
            if j >= n or toks[j][1] != ";" or depth[j] != 0:
                continue
            body = [x[1] for x in toks[i:j]]
            kinds = [x[0] for x in toks[i:j]]
            s0, e0 = toks[i][2], toks[j][3]
            repl = ";" + "\n" * text.count("\n", s0, e0)
            rule = None
            if body == ["break"]:
                rule = "del-break"
            elif body == ["continue"]:
                rule = "del-continue"
            elif body and (body[-1] in ("++", "--") or body[0] in ("++", "--")) and \
                    all(b in ("++", "--", "->", ".", "[", "]", "*", "(", ")") or kd in ("id", "num") for b, kd in zip(body, kinds)) \
                    and not any(b in KEYWORDS for b in body):
                rule = "del-incr"
            elif body and kinds[0] == "id" and body[0] not in KEYWORDS and body[-1] == ")":
                # NAME(...) or a->b.c(...) whose ')' closes the first '(' and ends it
                q = 1
                while q + 1 < len(body) and body[q] in ("->", ".") and kinds[q + 1] == "id":
                    q += 2
                if q < len(body) and body[q] == "(" and match.get(i + q) == j - 1:
                    rule = "del-call"
            if rule:
                add(rule, s0, e0, repl)
    for mu in out:
        mu.line = text.count("\n", 0, mu.start) + 1
        ls = text.rfind("\n", 0, mu.start) + 1
        le = text.find("\n", mu.start)
        le = len(text) if le < 0 else le
        mu.orig_line = text[ls:le].strip()
        mutated = text[ls:mu.start] + mu.repl + text[mu.end:]
        mu.mut_line = mutated[:mutated.find("\n") if "\n" in mutated else len(mutated)].strip()
    return out


# ---- running ----

class Interrupted(Exception):
    pass


def on_signal(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def run_cmd(cmd, cwd, env, timeout, log):
    """sh -c CMD in its own process group; (status or 'timeout', seconds). The whole
    group is killed on a timeout or an interrupt."""
    t0 = time.time()
    with open(log, "ab") as lf:
        p = subprocess.Popen(["sh", "-c", cmd], cwd=cwd, env=env, stdout=lf, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return "timeout", time.time() - t0
        except BaseException:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            raise
    return rc, time.time() - t0


def sync_sources(src, tree, builddir_names):
    """Make the copy's source files equal to the source tree's (content compared);
    returns the paths rewritten."""
    fixed = []
    for root, dirs, files in os.walk(src):
        relroot = os.path.relpath(root, src)
        keep = []
        for d in dirs:
            full = os.path.join(root, d)
            if d in (".git", "autom4te.cache") or os.path.exists(os.path.join(full, "config.status")):
                continue
            if relroot == "." and d in builddir_names:
                continue
            keep.append(d)
        dirs[:] = keep
        for f in files:
            s = os.path.join(root, f)
            if os.path.islink(s) or not os.path.isfile(s):
                continue
            t = os.path.join(tree, relroot, f)
            with open(s, "rb") as fh:
                data = fh.read()
            try:
                with open(t, "rb") as fh:
                    same = fh.read() == data
            except OSError:
                same = False
            if not same:
                os.makedirs(os.path.dirname(t), exist_ok=True)
                write_plain(t, data, s)
                fixed.append(os.path.relpath(t, tree))
    return fixed


def write_plain(path, data, original):
    """Write data to path, which must be a plain file of its own: never the original
    or a link to it (a hard link would carry the mutant into the source tree)."""
    if os.path.exists(path):
        st = os.lstat(path)
        so = os.stat(original)
        if os.path.islink(path) or (st.st_dev, st.st_ino) == (so.st_dev, so.st_ino) or st.st_nlink != 1:
            os.unlink(path)   # replace the link by a file of its own
    if os.path.realpath(path) == os.path.realpath(original):
        raise SystemExit("sweep: refusing to write the source file %s" % original)
    with open(path, "wb") as fh:
        fh.write(data)


def load_equivalent(path):
    eq = {}
    if not os.path.exists(path):
        return eq
    with open(path, encoding="utf-8") as fh:
        for ln, line in enumerate(fh, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 5:
                raise SystemExit("%s:%d: expected 5 tab-separated fields (file, rule, original, mutated, reason)" % (path, ln))
            eq[tuple(parts[:4])] = parts[4]
    return eq


def parse_range(s, what):
    m = re.fullmatch(r"(\d+)-(\d+)", s or "")
    if not m or int(m.group(1)) > int(m.group(2)):
        raise SystemExit("sweep: %s: expected LO-HI (line numbers), got '%s'" % (what, s))
    return int(m.group(1)), int(m.group(2))


def collect(srcdir, specs, lines):
    """The mutants of FILE[:LO-HI]... numbered from 1."""
    muts = []
    for spec in specs:
        f, _, rng = spec.partition(":")
        lo, hi = parse_range(rng, spec) if rng else (parse_range(lines, "--lines") if lines else (1, 1 << 30))
        path = os.path.join(srcdir, f)
        if not os.path.isfile(path):
            raise SystemExit("sweep: no file %s" % path)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        muts += [m for m in generate(path, f, text) if lo <= m.line <= hi]
    for k, m in enumerate(muts, 1):
        m.id = k
    return muts


def clean(s):
    return s.replace("\t", " ").replace("\n", " ")


def read_tsv(path):
    with open(path, encoding="utf-8") as fh:
        head = fh.readline().rstrip("\n").split("\t")
        return [dict(zip(head, line.rstrip("\n").split("\t"))) for line in fh if line.strip()]


def report(name, work, eq):
    """The last full run of sweep NAME and, where a later --only/--survivors run
    (NAME-only) ran some of its mutants again, their outcomes now."""
    full = os.path.join(work, name, "results.tsv")
    if not os.path.exists(full):
        raise SystemExit("sweep: %s: no results in %s" % (name, full))
    rows = read_tsv(full)
    later = os.path.join(work, name + "-only", "results.tsv")
    now = {r["id"]: r["outcome"] for r in read_tsv(later)} if os.path.exists(later) else {}
    def count(get):
        c = {}
        for r in rows:
            o = get(r)
            if o == "survived" and eq.get((r["file"], r["rule"], r["original"], r["mutated"])):
                o = "equivalent"
            c[o] = c.get(o, 0) + 1
        return c
    def fmt(c):
        return ", ".join("%s %d" % (k, c.get(k, 0)) for k in ("killed", "timeout", "build-failed", "survived", "equivalent"))
    print("%s: %d mutants run" % (name, len(rows)))
    print("  first run: %s (survived: not marked equivalent)" % fmt(count(lambda r: r["outcome"])))
    if now:
        print("  with %d of them run again since: %s" % (len(now), fmt(count(lambda r: now.get(r["id"], r["outcome"])))))
    for r in rows:
        o = now.get(r["id"], r["outcome"])
        if o == "survived":
            why = eq.get((r["file"], r["rule"], r["original"], r["mutated"]))
            print("  %s %s:%s %s: %s -> %s  [%s]" % (r["id"], r["file"], r["line"], r["rule"], r["original"], r["mutated"],
                                                  "equivalent: " + why if why else "SURVIVES"))
    return 0


def sweep(a, name, srcdir, tree, bld, work, eq):
    muts = collect(srcdir, a.files, a.lines)
    total = len(muts)
    chosen = muts
    if a.survivors:   # the survivors of the last full run of this sweep
        prev = os.path.join(work, name, "results.tsv")
        if not os.path.exists(prev):
            raise SystemExit("sweep: %s: no earlier run (%s) to take the survivors of" % (name, prev))
        a.only = ",".join(r["id"] for r in read_tsv(prev) if r["outcome"] == "survived") or "0"
    if a.report:
        return report(name, work, eq)
    if a.only:
        ids = {int(x) for x in a.only.split(",") if x}
        chosen = [m for m in muts if m.id in ids]
    elif a.sample and a.sample < total:
        pick = sorted(random.Random(a.seed).sample(range(total), a.sample))
        chosen = [muts[i] for i in pick]
    if a.list:
        for m in chosen:
            print("%d\t%s\t%d\t%s\t%s\t%s" % (m.id, m.file, m.line, m.rule, clean(m.orig_line), clean(m.mut_line)))
        print("%s: %d mutants, %d listed" % (name, total, len(chosen)), file=sys.stderr)
        return 0
    if not a.test:
        raise SystemExit("sweep: %s: no --test command" % name)
    out = os.path.join(work, name + ("-only" if a.only else ""))   # (a full run's results stay)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    env = dict(os.environ, top_srcdir=tree, top_builddir=bld)
    say = lambda s: print("sweep %s: %s" % (name, s), flush=True)
    # the unmutated run: it must pass, and it sets the timeout
    blog = os.path.join(out, "logs", "baseline.log")
    open(blog, "w").close()
    rc, _ = run_cmd(a.build, bld, env, 1800, blog)
    if rc != 0:
        raise SystemExit("sweep: %s: the copy does not build (%s)" % (name, blog))
    rc, base = run_cmd(a.test, bld, env, 1800, blog)
    if rc != 0:
        raise SystemExit("sweep: %s: the test command fails without a mutant (%s): %s" % (name, blog, a.test))
    timeout = a.timeout or 3 * base + 10
    say("%d mutants, running %d (%s); unmutated test run %.1f s, timeout %.0f s"
        % (total, len(chosen), "sample %d seed %d" % (a.sample, a.seed) if chosen is not muts and not a.only else
           "--only" if a.only else "all", base, timeout))
    tsv = open(os.path.join(out, "results.tsv"), "w", encoding="utf-8")
    tsv.write("id\tfile\tline\trule\toriginal\tmutated\toutcome\tseconds\n")
    marker = os.path.join(work, "MUTATED")
    counts = {}
    survivors = []
    t_all = time.time()
    texts = {}
    for m in chosen:
        if m.file not in texts:
            with open(os.path.join(srcdir, m.file), "rb") as fh:
                texts[m.file] = fh.read().decode("utf-8")
        text = texts[m.file]
        dst, orig = os.path.join(tree, m.file), os.path.join(srcdir, m.file)
        log = os.path.join(out, "logs", "%d.log" % m.id)
        with open(log, "w") as fh:
            fh.write("mutant %d: %s:%d %s\n- %s\n+ %s\n" % (m.id, m.file, m.line, m.rule, m.orig_line, m.mut_line))
        t0 = time.time()
        try:
            with open(marker, "w") as fh:
                fh.write(m.file + "\n")
            write_plain(dst, (text[:m.start] + m.repl + text[m.end:]).encode("utf-8"), orig)
            rc, _ = run_cmd(a.build, bld, env, 1800, log)
            if rc != 0:
                outcome = "build-failed"
            else:
                rc, _ = run_cmd(a.test, bld, env, timeout, log)
                outcome = "timeout" if rc == "timeout" else "survived" if rc == 0 else "killed"
        finally:
            write_plain(dst, text.encode("utf-8"), orig)
            os.unlink(marker)
        dt = time.time() - t0
        counts[outcome] = counts.get(outcome, 0) + 1
        key = (m.file, m.rule, clean(m.orig_line), clean(m.mut_line))
        tsv.write("%d\t%s\t%d\t%s\t%s\t%s\t%s\t%.1f\n" % (m.id, m.file, m.line, m.rule, key[2], key[3], outcome, dt))
        tsv.flush()
        if outcome == "survived":
            survivors.append((m, eq.get(key)))
        say("%d %s:%d %s: %s (%.0f s)%s" % (m.id, m.file, m.line, m.rule, outcome, dt,
                                            "" if outcome != "survived" else "  | " + clean(m.mut_line)))
    tsv.close()
    neq = sum(1 for _, r in survivors if r)
    lines = ["sweep %s: %s" % (name, " ".join(shlex.quote(x) for x in a.files)),
             "test: %s" % a.test,
             "mutants: %d generated, %d run (%.0f%%)%s" % (total, len(chosen), 100.0 * len(chosen) / max(total, 1),
                                                           ", sample seed %d" % a.seed if a.sample and not a.only and a.sample < total else ""),
             "killed %d, survived %d (equivalent-marked %d, unexplained %d), timeout %d, build-failed %d; %.0f s"
             % (counts.get("killed", 0), len(survivors), neq, len(survivors) - neq, counts.get("timeout", 0),
                counts.get("build-failed", 0), time.time() - t_all),
             "survivors:"]
    for m, r in survivors:
        lines.append("  %d %s:%d %s: %s  ->  %s   [%s]" % (m.id, m.file, m.line, m.rule, clean(m.orig_line),
                                                           clean(m.mut_line), "equivalent: " + r if r else "UNEXPLAINED"))
    with open(os.path.join(out, "summary.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 1 if a.strict and len(survivors) > neq else 0


def main():
    ap = argparse.ArgumentParser(description="mutation sweep of C files against a test command (see the file's docstring)")
    ap.add_argument("files", nargs="*", help="FILE[:LO-HI] relative to the source tree (with --plan: the plan's NAMEs)")
    ap.add_argument("--test", help="the test command (sh -c, in the copy's build directory)")
    ap.add_argument("--build", default="nice -n 10 make -j1", help="the rebuild command")
    ap.add_argument("--lines", help="LO-HI: only mutants on these lines (of every FILE)")
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", help="ID,ID,...: only these mutants")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--survivors", action="store_true", help="only the survivors of the last full run (results under NAME-only)")
    ap.add_argument("--report", action="store_true", help="summarize the last run (and a later --only run): runs nothing")
    ap.add_argument("--timeout", type=float, default=0)
    ap.add_argument("--plan", help="a file of sweeps, one a line: NAME: ARGS (as on this command line)")
    ap.add_argument("--name", default="sweep", help="the output directory's name under --work")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a survivor is not marked equivalent")
    ap.add_argument("--srcdir", default=os.environ.get("top_srcdir"))
    ap.add_argument("--builddir", default=os.environ.get("top_builddir", "."))
    ap.add_argument("--work")
    ap.add_argument("--fresh", action="store_true")
    a = ap.parse_args()
    srcdir = os.path.realpath(a.srcdir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    builddir = os.path.realpath(a.builddir)
    jobs = []
    if a.plan:
        with open(a.plan) as fh:
            for ln, line in enumerate(fh, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                nm, sep, rest = line.partition(":")
                if not sep or not re.fullmatch(r"[\w-]+", nm):
                    raise SystemExit("%s:%d: expected NAME: ARGS" % (a.plan, ln))
                if a.files and nm not in a.files:
                    continue
                sub = ap.parse_args(shlex.split(rest))
                for opt in ("sample", "seed", "only", "list", "strict", "timeout", "survivors", "report"):   # the command line wins
                    if getattr(a, opt) and opt != "seed" or (opt == "seed" and a.seed != 1):
                        setattr(sub, opt, getattr(a, opt))
                jobs.append((nm, sub))
        if not jobs:
            raise SystemExit("sweep: no sweep in %s matches %s" % (a.plan, " ".join(a.files)))
    else:
        if not a.files:
            raise SystemExit("sweep: no FILE (or --plan)")
        jobs.append((a.name, a))
    eq = load_equivalent(os.path.join(srcdir, "tests", "mutants", "equivalent.tsv"))
    work = os.path.realpath(a.work or os.path.join(builddir, "mutants-sweep"))
    if all(sub.list or sub.report for _, sub in jobs):
        for nm, sub in jobs:
            sweep(sub, nm, srcdir, None, None, work, eq)
        return 0
    if not os.path.isfile(os.path.join(builddir, "config.status")):
        raise SystemExit("sweep: %s is not a configured build directory (--builddir)" % builddir)
    if not builddir.startswith(srcdir + os.sep):
        raise SystemExit("sweep: the build directory must be inside the source tree (as ./setup makes it)")
    os.makedirs(work, exist_ok=True)
    lock = open(os.path.join(work, "lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise SystemExit("sweep: another sweep is running in %s" % work)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    tree = os.path.join(work, "tree")
    rel = os.path.relpath(builddir, srcdir)
    bld = os.path.join(tree, rel)
    try:
        if a.fresh and os.path.exists(tree):
            subprocess.run(["rm", "-rf", tree], check=True)
        if not os.path.isfile(os.path.join(bld, "config.status")):
            if os.path.exists(tree):
                subprocess.run(["rm", "-rf", tree], check=True)
            print("sweep: copying and building the tree in %s" % tree, flush=True)
            env = dict(os.environ, top_srcdir=srcdir, top_builddir=builddir, MAKE_JOBS="1")
            r = subprocess.run(["sh", os.path.join(srcdir, "tests", "mutants", "copy.sh"), work], env=env,
                               stdout=subprocess.DEVNULL)
            if r.returncode != 0:
                raise SystemExit("sweep: copying the tree failed")
        else:
            # a reused copy (or one a killed sweep left): its sources made equal to the source tree's
            fixed = sync_sources(srcdir, tree, {rel.split(os.sep)[0]})
            if os.path.exists(os.path.join(work, "MUTATED")):
                os.unlink(os.path.join(work, "MUTATED"))
            if fixed:
                print("sweep: %d source file(s) of the copy brought up to date: %s" % (len(fixed), " ".join(fixed[:8])),
                      flush=True)
        st = 0
        for nm, sub in jobs:
            st |= sweep(sub, nm, srcdir, tree, bld, work, eq)
        return st
    except Interrupted as e:
        print("sweep: interrupted (%s); the copy is restored" % e, file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
