"""Summarises a compiler-call log written by tools/log-inductor-cxx (one JSON
object per line: argv, cwd, rc, seconds, env) by kind of invocation.

    python3 tools/summarise-cxx-log.py LOG.jsonl
    python3 tools/summarise-cxx-log.py --json LOG.jsonl   # counts only

--json prints {"calls": n, "builds": n, "build_seconds": s, "kinds": {kind: n}}
where builds are the cacheable kinds (header precompilation, compile to an
object, compile and link a shared object); a missing log counts as empty.

Paths are shown with placeholders: $TMPDIR and $CACHE (the TMPDIR and
TORCHINDUCTOR_CACHE_DIR the call saw), $SITE (a Python site-packages
directory). For each kind: how many
calls, their total and largest time, one full example, and every flag seen
in that kind with the number of calls that passed it.
"""

import collections
import json
import re
import sys


def kind(argv):
    if not any(not a.startswith("-") for a in argv):
        return "probe (no input: " + " ".join(argv) + ")"
    if "-###" in argv:
        # pt2cache-cxx learns a link's libraries so on a miss.
        return "dry run (-###: prints the commands, runs none)"
    if "-E" in argv:
        return "preprocess (-E)"
    if "-x" in argv and argv[argv.index("-x") + 1:][:1] == ["c++-header"]:
        return "precompile header (-x c++-header ... -o X.h.gch)"
    if "-c" in argv:
        return "compile to object (-c)"
    if "-shared" in argv:
        return "compile and link a shared object (-shared -o X.so)"
    return "other"


def placeholders(record):
    env = record.get("env", {})
    subs = []
    for name, var in (("TORCHINDUCTOR_CACHE_DIR", "$CACHE"), ("TMPDIR", "$TMPDIR")):
        if env.get(name):
            subs.append((env[name].rstrip("/"), var))
    subs.sort(key=lambda s: -len(s[0]))  # longest first: cache dirs may sit in TMPDIR

    def apply(text):
        for path, var in subs:
            if path and path != "/":
                text = text.replace(path, var)
        return re.sub(r"/\S*?/site-packages", "$SITE", text)

    return apply


def flag_name(arg):
    """A flag's identity: attached paths of -I, -L and -o are elided."""
    for prefix in ("-I", "-L", "-o"):
        if arg.startswith(prefix) and len(arg) > len(prefix):
            return prefix + "<path>"
    return arg


BUILD_KINDS = ("precompile header", "compile to object", "compile and link")


def counts(records):
    builds = [r for r in records if kind(r["argv"]).startswith(BUILD_KINDS)]
    return {"calls": len(records), "builds": len(builds),
            "build_seconds": round(sum(r["seconds"] for r in builds), 3),
            "kinds": dict(collections.Counter(kind(r["argv"]) for r in records))}


def main():
    as_json = sys.argv[1] == "--json"
    path = sys.argv[2] if as_json else sys.argv[1]
    try:
        records = [json.loads(line) for line in open(path) if line.strip()]
    except FileNotFoundError:
        if not as_json:
            raise
        records = []
    if as_json:
        print(json.dumps(counts(records)))
        return
    groups = collections.defaultdict(list)
    for r in records:
        groups[kind(r["argv"])].append(r)
    print(f"{len(records)} compiler calls, {sum(r['seconds'] for r in records):.1f} s in all")
    for name, calls in sorted(groups.items(), key=lambda g: -sum(r["seconds"] for r in g[1])):
        secs = [r["seconds"] for r in calls]
        failed = sum(1 for r in calls if r["rc"] != 0)
        print(f"\n== {name}: {len(calls)} calls, {sum(secs):.1f} s total, max {max(secs):.1f} s"
              + (f", {failed} failed" if failed else ""))
        example = max(calls, key=lambda r: len(r["argv"]))
        apply = placeholders(example)
        print("example (cwd " + apply(example["cwd"]) + "):")
        print("  g++ " + " ".join(apply(a) for a in example["argv"]))
        seen = collections.Counter()
        for r in calls:
            ap = placeholders(r)
            seen.update(set(flag_name(ap(a)) for a in r["argv"] if a.startswith("-")))
        print("flags (calls passing each):")
        print("  " + "  ".join(f"{f}[{n}]" for f, n in sorted(seen.items())))
        envs = collections.Counter(k for r in calls for k in r.get("env", {}))
        print("environment seen: " + ", ".join(sorted(envs)))


if __name__ == "__main__":
    main()
