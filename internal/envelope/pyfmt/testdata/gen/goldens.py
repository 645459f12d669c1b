#!/usr/bin/env python3
"""Regenerate pyfmt's golden files, with Python itself as the oracle.

Run from the repository root (needs PyYAML 6.0.x and orjson 3.8.x, as
LionAGI 0.27.0 was recorded with):

    python3 internal/envelope/pyfmt/testdata/gen/goldens.py

It first checks its own mirror of LionAGI's minimal_yaml against the
recorded vectors (the repository's testdata/lionagi-0.27.0, or
$HISTORYD_VECTORS when set), then writes, beside this folder:

  minimal_yaml.jsonl   {"input": JSON text, "drop_empties": bool, "output": str}
  str_repr.jsonl       {"input": JSON text, "str": str(v), "repr": repr(v)}
  repr_blocks.jsonl    {"first", "last", "sha256"}: repr() of every code point
                       of a 256-code-point block (surrogates left out)
  yaml_blocks.jsonl    same, for minimal_yaml({"k": block}) and as a key

Every input is JSON text, read back with json.loads, so numbers keep the
type Python gives them (1 int, 1.0 float, 1e400 inf) and keys their order.
"""

import hashlib
import json
import os
import random
import sys

import orjson
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.dirname(HERE)

# ---------------------------------------------------------------------------
# The call LionAGI 0.27.0 makes (lionagi/libs/schema/minimal_yaml.py),
# restated: a SafeDumper that never writes aliases, strings holding "\n"
# asked for in literal block style, empties pruned bottom-up (None, text
# that strip()s to "", empty list or dict; 0 and False stay), then
# yaml.dump in block style, insertion order, unicode kept, indent 2 and an
# unbounded line width. A str argument is first tried as JSON with orjson.


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


def _str_representer(dumper, text):
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str_representer)


def _empty(x):
    if x is None:
        return True
    if isinstance(x, str):
        return x.strip() == ""
    if isinstance(x, (dict, list)):
        return not x
    return False


def _prune(x):
    if isinstance(x, dict):
        out = {k: _prune(v) for k, v in x.items() if not _empty(v)}
        return {k: v for k, v in out.items() if not _empty(v)}
    if isinstance(x, list):
        out = [_prune(v) for v in x if not _empty(v)]
        return [v for v in out if not _empty(v)]
    return x


def minimal_yaml(value, drop_empties=True):
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            pass
    if drop_empties:
        value = _prune(value)
    return yaml.dump(
        value,
        Dumper=_Dumper,
        default_flow_style=False,
        sort_keys=False,
        allow_unicode=True,
        indent=2,
        width=2**31 - 1,
    )


# ---------------------------------------------------------------------------


def check_against_vectors():
    path = os.environ.get("HISTORYD_VECTORS") or "testdata/lionagi-0.27.0"
    if os.path.isdir(path):
        path = os.path.join(path, "lionagi-0.27.0.jsonl")
    if not os.path.exists(path):
        print("vectors not found; mirror not checked", file=sys.stderr)
        return
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec["group"] != "minimal_yaml" or rec.get("python_only"):
                continue
            inp = rec["input"]
            got = minimal_yaml(inp["value"], inp.get("drop_empties", True))
            if got != rec["output"]:
                sys.exit("mirror disagrees with vector %r: %r != %r" % (rec["name"], got, rec["output"]))
            n += 1
    print("mirror matches %d minimal_yaml vectors" % n, file=sys.stderr)


def text(v):
    return json.dumps(v, ensure_ascii=False)


# --- interesting scalars -----------------------------------------------------

ASCII = [chr(c) for c in range(128)]
BREAKS = ["\n", "\r", "\r\n", "\x85", "\u2028", "\u2029"]
UNICODE_EDGES = [
    0x7F, 0x80, 0x84, 0x85, 0x86, 0x9F, 0xA0, 0xA1, 0xAD, 0xFF, 0x100, 0x378, 0x600,
    0x1680, 0x180E, 0x200B, 0x200D, 0x200E, 0x2028, 0x2029, 0x202F, 0x205F, 0x2060,
    0x2066, 0x3000, 0xD7FF, 0xE000, 0xF8FF, 0xFEFF, 0xFFF9, 0xFFFC, 0xFFFD, 0xFFFE,
    0xFFFF, 0x10000, 0x1D173, 0x1F600, 0x1FAF8, 0x1F979, 0xE0001, 0xE0020, 0xF0000,
    0x10FFFD, 0x10FFFE, 0x10FFFF, 0xE9, 0x4E2D, 0x5B57, 0x1F1FA,
]
WORDS = [
    "plain", "yes", "Yes", "YES", "yEs", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF",
    "y", "Y", "n", "N", "true", "True", "TRUE", "tRue", "false", "False", "FALSE",
    "null", "Null", "NULL", "nULL", "~", "", " ", "  ", "<<", "<", "<<<", "=", "==", "!", "&", "*",
    "0", "-0", "+0", "00", "01", "07", "08", "09", "017", "0o17", "0O17", "0x1F", "0X1F", "0x", "0xg",
    "0b101", "0b", "0b2", "-0b1", "+0x1f", "1_000", "1__0", "_1", "1_", "0_", "-0_7", "123", "-7", "+1",
    "1.5", "1.", ".5", "-.5", "+.5", "1.5e3", "1.5e+3", "1.5E-3", "1.e+3", "1e3", "1E3", "1e+3",
    "1.0e+20", "1e", "e1", "1.5e", "1.5e+", ".e1", ".", "..", "...", "....", "-", "--", "---", "----",
    "--- x", "... x", "-.inf", "+.inf", ".inf", ".Inf", ".INF", ".iNf", "inf", "-inf", "Infinity",
    ".nan", ".NaN", ".NAN", "NaN", "nan", "-.nan", "1_0.5", "1:2", "1:2:3", "12:30", "12:60",
    "12:59", "1:02:03.5", "-1:30", "+1:30", "1:30.5", "0:30", "01:30", "190:20:30", "1:3:5:7",
    "1::2", "1:", ":1", "1:234", "2024-01-01", "2024-1-1", "2024-01-01T10:00:00", "2024-01-01t10:00:00",
    "2024-01-01 10:00:00", "2024-01-01  10:00:00", "2024-01-01T10:00:00Z", "2024-01-01T10:00:00.5Z",
    "2024-01-01T10:00:00.123456+05:30", "2024-01-01T10:00:00 +05", "2024-01-01T10:00:00-5",
    "2024-01-01T1:00:00", "2024-1-01T10:00:00", "2024-01-01T10:00", "2024-01-01T10:00:00+05:3",
    "2024-01-01T10:00:00.", "24-01-01", "2024-01-011", "2024/01/01",
    "a: b", "a:b", "a :b", "a:", "a::", ":a", ": a", "a #b", "a#b", "#c", "# c", "a #", "- x", "-x", "x -",
    "?", "? x", "?x", "x?", ":", "*a", "&a", "!t", "%p", "@x", "`x", "'q'", '"q"', "it's", "{a}", "[a]",
    "a,b", "a]b", "a[b", "a{b", "a}b", "|", "|x", ">", ">x", "x|", "x>", "a\tb", "tab\there", "\t", " \t",
    "back\\slash", "\\", "\\n", "é unicode", "emoji 😀", "x" * 130, "a b c", " lead", "trail ",
    " both ", "a  b", "a \n b", "line\n", "\nlead", "a\n\nb", "a\nb", "a \nb", "a\n b", "a\r\nb",
    "\n", "\n\n", "\n\n\n", " \n", "\n ", "x\n\n", "x\n\n\n", "x\n \n", "\n\nx", " x\ny", "x\ny ",
    "x\n y\n", "  x\n", "\tx\ny", "x\ny\t", "x\n\ty", "\x00", "a\x00b", "ctrl\x07", "\x1b[0m", "\x7f",
    "\ufeffbom", "bom\ufeff", "nbsp\xa0x", "\xa0", "nel\x85x", "\x85", "ls\u2028x", "ps\u2029x",
    "x\u2028", "\u2028x", "x \u2028y", "x\u2028 y", "x\n\u2028y", "x\u2028\ny", "x\r", "\rx", "x\ry",
    "line1\nline2\r\nline3", "'", "''", "\"", "'\"", "\"'", "a'b\"c", "it's \"x\"", "\\'", "\\\"",
    "%", "@", "`", "a%b", "a@b", "a`b", "a!b", "a&b", "a*b", "x ? y", "x : y", "x - y", "x # y",
    "http://example.com/a?b=c#d", "C:\\path\\to", "key: value # comment", "[1, 2]", "{a: 1}",
    "- - x", "x\n- y", "x: |", "｜", "＃", "Ａ: Ｂ",
]


def scalar_strings():
    out = list(WORDS)
    for c in ASCII:
        out += [c, c + "x", "x" + c, "x" + c + "x", "x " + c, c + " x", "x " + c + " x", c + c, c * 3]
    for b in BREAKS:
        for pat in ["%s", "x%s", "%sx", "x%sy", "x%s%sy", "x %sy", "x%s y", " x%sy", "x%sy ", "%s%s",
                    "x%s%s", "%s%sx", "x%s\n", "x\n%s", "x%s\ny", "x\n%sy"]:
            out.append(pat.replace("%s", b))
    for cp in UNICODE_EDGES:
        c = chr(cp)
        out += [c, "x" + c, c + "x", "x" + c + "y", "x " + c, "x\n" + c, c + "\n", "x\t" + c]
    # Long text: never folded (width is unbounded), with and without spaces.
    out += ["word " * 60, ("word " * 60).strip(), "y" * 5000, "a b" * 3000, "line\n" * 50,
            ("x" * 100 + "\n") * 3, "é" * 300, "😀" * 200, "x\t" * 100]
    return out


def number_literals():
    return [
        "0", "-0", "1", "-1", "42", "9223372036854775807", "9223372036854775808",
        "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
        "18446744073709551616", "100000000000000000000", "1" + "0" * 400, "-" + "9" * 50,
        "9007199254740993", "0.0", "-0.0", "1.0", "1.5", "0.1", "2.0", "1e3", "1E3", "1e+3",
        "1E-3", "1e-7", "2.5e-05", "1e16", "1e15", "1e17", "1.0e+20", "1e+20", "123456789.0",
        "1700000000.5", "5e-324", "2.4703282292062328e-324", "1e-400", "-1e-400", "1e400",
        "-1e400", "1.7976931348623157e308", "1.7976931348623159e308", "0.30000000000000004",
        "3.14159", "1e22", "1e21", "9007199254740993.0", "12345678901234567890.0", "1.5E+300",
        "0e0", "-0e-0", "100.0", "1e-5", "0.0001", "0.00001", "123.456e-10", "-2.5E+10",
        "1000000000000000.0", "10000000000000000.0", "0.000123", "4.35", "1.0000000000000002",
    ]


PUNCT = list(" -?:#,[]{}&*!|>'\"%@`.~<=_+\\/")
LETTERS = list("abyYnNtTfFoO019xe")
SPECIAL = ["\n", "\r", "\t", " ", "\x00", "\x07", "\x1b", "\x7f", "\x85", "\xa0", "\xad", "\u2028",
           "\u2029", "\ufeff", "\ufffd", "\uffff", "é", "😀", "\U0010ffff", "\u0378", "\U000e0001",
           "'", '"', "\\", ":", "-", "#"]


def rand_string(rng):
    kind = rng.random()
    if kind < 0.35:
        alpha = PUNCT + LETTERS
        n = rng.randint(1, 6)
    elif kind < 0.7:
        alpha = ["a", "b", " ", " ", "\n", "\n", "'", '"'] + SPECIAL
        n = rng.randint(1, 12)
    elif kind < 0.85:
        alpha = LETTERS + ["-", ".", ":", "_", "+", " ", "T", "Z", "e", "E", "x", "b", "o"]
        n = rng.randint(1, 10)
    else:
        return "".join(rand_char(rng) for _ in range(rng.randint(1, 8)))
    return "".join(rng.choice(alpha) for _ in range(n))


def rand_char(rng):
    while True:
        r = rng.random()
        if r < 0.3:
            cp = rng.randint(0, 0x7F)
        elif r < 0.6:
            cp = rng.randint(0x80, 0x3000)
        elif r < 0.85:
            cp = rng.randint(0x3000, 0xFFFF)
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def rand_tree(rng, depth):
    r = rng.random()
    if depth <= 0 or r < 0.45:
        s = rng.random()
        if s < 0.5:
            return ("s", rand_string(rng))
        if s < 0.6:
            return ("n", rng.choice(number_literals()[:12] + ["1.5", "0.0", "1e3", "-0.0", "2.5e-05"]))
        if s < 0.7:
            return ("l", rng.choice(["true", "false", "null"]))
        return ("s", rng.choice(WORDS))
    if r < 0.72:
        return ("a", [rand_tree(rng, depth - 1) for _ in range(rng.randint(0, 4))])
    keys = []
    for _ in range(rng.randint(0, 4)):
        k = rand_string(rng) if rng.random() < 0.5 else rng.choice(["a", "b", "key", "k2", "x y"] + WORDS[:40])
        if k not in keys:
            keys.append(k)
    return ("o", [(k, rand_tree(rng, depth - 1)) for k in keys])


def tree_text(t):
    kind, v = t
    if kind == "s":
        return text(v)
    if kind in ("n", "l"):
        return v
    if kind == "a":
        return "[" + ",".join(tree_text(e) for e in v) + "]"
    return "{" + ",".join(text(k) + ":" + tree_text(e) for k, e in v) + "}"


STRUCTURES = [
    "{}", "[]", "{\"a\":{}}", "{\"a\":[]}", "[[]]", "[{}]", "[[], {}]", "{\"a\":[[]]}", "{\"a\":{\"b\":{}}}",
    "{\"a\":1,\"b\":[1,2,{\"c\":\"d\"}],\"e\":{\"f\":{\"g\":\"h\"}}}", "{\"list_of_lists\":[[1,2],[3]]}",
    "[{\"a\":1},{\"b\":2}]", "[[1,[2,[3,[4]]]]]", "[[[{\"a\":[[{\"b\":1}]]}]]]",
    "{\"a\":[{\"b\":[{\"c\":[]}]}]}", "{\"a\":null,\"b\":\"\",\"c\":[],\"d\":{},\"e\":\" \",\"f\":0,\"g\":false}",
    "[null,\"\",[],{},\" \",0,false,[null],{\"x\":null},[[[]]],{\"y\":{\"z\":[\"\"]}}]",
    "{\"empty_pruned\":{\"x\":null,\"y\":\"\",\"z\":[],\"w\":{},\"v\":\"  \"},\"keep0\":0,\"keepF\":false}",
    "{\"\":1}", "{\"\":{}}", "{\"\":[1,2]}", "{\"\":{\"a\":1}}", "{\"\":\"a\\nb\"}", "{\"a\\nb\":1}",
    "{\"a\\nb\":{\"c\":1}}", "{\"a\\nb\":[1,2]}", "{\"a\\nb\\n\":\"x\\n\\n\"}", "{\"\\n\":\"\\n\"}",
    "{\"a\\u2028b\":1}", "{\"a\\u0085b\":[1]}", "{\"a b\\n\":1}", "{\"a \\nb\":1}", "{\"\\tk\":1}",
    "{\"multi\":\"l1\\nl2\\n\",\"multi_trailing_nl2\":\"l1\\n\\n\"}", "{\"a\":\"x\\n\\n\",\"b\":1}",
    "{\"a\":\"x\\n\\n\",\"b\":[1]}", "{\"a\":[\"x\\n\\n\"]}", "[\"x\\n\\n\",\"y\\n\\n\"]", "\"x\\n\\n\"",
    "{\"a\":{\"b\":\"x\\n\\n\"}}", "{\"a\":{\"b\":\"x\\n\\n\"},\"c\":\"d\"}", "{\"nested_multi\":{\"m\":\"a\\nb\"}}",
    "[\"top\",\"level\",\"list\"]", "[[\"a\\nb\",[\"c\\n\"]],{\"k\":[\"\\nx\"]}]",
    "{\"a\":[{\"b\":1,\"c\":[1,{\"d\":[]}]},[{\"e\":{}}]]}", "[1,[2,[3]],{\"a\":[4,{\"b\":5}]}]",
    "{\"k\":[[],[{}],[[]],{}]}", "[{\"a\":[]},{\"b\":{}}]", "{\"x\":[{\"y\":\" \"},{\"z\":null}]}",
    "{\"yes\":1,\"key: colon\":2,\"123\":3,\"\":4}", "{\"a\":1,\"a\":2}",
    "{\"" + "k" * 121 + "\":1}", "{\"" + "k" * 122 + "\":1}", "{\"" + "k" * 123 + "\":1}",
    "{\"" + "k" * 124 + "\":1}", "{\"" + "k" * 127 + "\":1}", "{\"" + "k" * 128 + "\":1}",
    "{\"" + "k" * 300 + "\":{\"a\":1}}", "{\"" + "é" * 122 + "\":1}", "{\"" + "é" * 123 + "\":1}",
    "{\"" + "😀" * 122 + "\":1}", "{\"" + "😀" * 123 + "\":[1]}", "{\"" + "yes" * 41 + "\":1}",
    "{\"" + "'" * 123 + "\":1}", "{\"" + "'" * 122 + "\":1}", "{\"" + "a\\t" * 61 + "\":1}",
    "{\"" + "a\\t" * 62 + "\":[1,2]}", "{\"" + "x" * 200 + "\":{\"" + "y" * 200 + "\":[\"z\"]}}",
    "{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":[[[[\"deep\\nline\"]]]]}}}}}}}",
]

TOP_LEVEL_TEXTS = [
    '{"a":1}', '[1, 2]', '123', '-0', '1.0', '1e400', '[1e400]', '{"a": 1e400}', '-1e400', '1e-400',
    '100000000000000000000', '18446744073709551615', '18446744073709551616', '-9223372036854775808',
    '-9223372036854775809', '[' + '1' * 400 + ']', '"abc"', '"  "', '""', '"\\u00e9\\n"', 'null', 'true',
    'false', ' ', '', 'not json', '[1,]', '{"a": "  ", "b": 1}', ' {"a":1} ', '{"a":1}x', '{"a":{"b":[]}}',
    '[1e-400]', '"\\ud800"', '\ufeff{}', '{"json": "string is parsed first"}', '{"a":1,"a":2}',
    '[' * 50 + ']' * 50, '{"k": 0.1}', 'NaN', 'Infinity', '[NaN]', '01', '1.', '.5', '{"a":"x\\n"}',
    'yes', 'no', 'a\nb', 'a\n\n', 'x ', '12:30', '"12:30"', '[\"a\", null, \"\"]', '\t\n[]\r\n',
    '{"a":1}\n', '"\\u2028"', '1E5', '[-0.0, 0e0]', '{"":null}', 'x' * 50,
]


def yaml_cases():
    rng = random.Random(20261202)
    cases = []  # (json text, drop_empties)

    def add(t, both=False):
        cases.append((t, True))
        if both:
            cases.append((t, False))

    for s in scalar_strings():
        add(text({"k": s}), both=True)
        add(text({s: "v"}))
        add(text([s]))
        add(text({"a": {"b": s}}))
        add(text({"a": [s, {"c": s}]}))
        add(text([[s], {s: [s]}]))
        add(text(s), both=True)  # a top-level str is first tried as JSON
    for lit in number_literals():
        add('{"k":%s}' % lit, both=True)
        add('[%s,{"a":[%s]}]' % (lit, lit))
        add(lit, both=True)
    for t in STRUCTURES:
        add(t, both=True)
    for t in TOP_LEVEL_TEXTS:
        add(text(t), both=True)
    # The benchmark's instruction document.
    with open(os.path.join(OUT, "instruction.json"), encoding="utf-8") as f:
        doc = f.read()
    add(json.dumps(json.loads(doc), ensure_ascii=False), both=True)
    for lit in ["true", "false", "null"]:
        add('{"k":%s}' % lit, both=True)
        add(lit, both=True)
        add("[%s]" % lit, both=True)
    # Whitespace as Python's str.strip() sees it, and its look-alikes.
    for cp in list(range(0, 0x21)) + [0x7F, 0x85, 0xA0, 0x1680, 0x180E, 0x200B, 0x2028, 0x2029,
                                      0x202F, 0x205F, 0x2060, 0x3000, 0xFEFF] + list(range(0x2000, 0x200C)):
        c = chr(cp)
        add(text({"k": c, "k2": c + c, "k3": c + "x", "l": [c, " " + c]}), both=True)
    for _ in range(2500):
        add(tree_text(rand_tree(rng, rng.randint(1, 5))), both=rng.random() < 0.3)
    for _ in range(1500):
        s = rand_string(rng)
        add(text({"k": s, s: 1, "l": [s]}))
    return cases


def write_jsonl(name, rows):
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print("wrote %s (%d records, %d bytes)" % (path, len(rows), os.path.getsize(path)), file=sys.stderr)


def sha(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()[:32]


def blocks():
    for b in range(0x110000 // 256):
        cps = [c for c in range(b * 256, b * 256 + 256) if not 0xD800 <= c <= 0xDFFF]
        if cps:
            yield cps[0], cps[-1], "".join(chr(c) for c in cps)


def main():
    check_against_vectors()

    rows, seen = [], set()
    for t, drop in yaml_cases():
        if (t, drop) in seen:
            continue
        seen.add((t, drop))
        v = json.loads(t)
        rows.append({"input": t, "drop_empties": drop, "output": minimal_yaml(v, drop)})
    write_jsonl("minimal_yaml.jsonl", rows)

    rng = random.Random(7)
    inputs = []
    for s in scalar_strings():
        inputs += [text(s), text([s]), text({s: s})]
    for lit in number_literals() + ["true", "false", "null"]:
        inputs += [lit, "[%s, %s]" % (lit, lit), '{"k": %s}' % lit]
    inputs += STRUCTURES
    inputs += [text(t) for t in TOP_LEVEL_TEXTS]
    for cp in UNICODE_EDGES + list(range(0x80, 0x100)):
        inputs.append(text(chr(cp) + "'" + chr(cp) + '"'))
    for _ in range(2500):
        inputs.append(tree_text(rand_tree(rng, rng.randint(1, 5))))
    for _ in range(1500):
        inputs.append(text("".join(rand_char(rng) for _ in range(rng.randint(1, 12)))))
    rows, seen = [], set()
    for t in inputs:
        if t in seen:
            continue
        seen.add(t)
        v = json.loads(t)
        rows.append({"input": t, "str": str(v), "repr": repr(v)})
    write_jsonl("str_repr.jsonl", rows)

    write_jsonl("repr_blocks.jsonl",
                [{"first": a, "last": z, "sha256": sha(repr(s))} for a, z, s in blocks()])
    write_jsonl("yaml_blocks.jsonl",
                [{"first": a, "last": z, "value": sha(minimal_yaml({"k": s})),
                  "key": sha(minimal_yaml({s[:60]: 1, s[60:]: [s[:3]]})),
                  "pairs": sha(minimal_yaml([s[i:i + 2] for i in range(0, len(s), 2)]))}
                 for a, z, s in blocks()])


if __name__ == "__main__":
    main()
