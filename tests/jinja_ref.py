#!/usr/bin/env python3
"""Reference renderer for test_jinja_ref: Hugging Face transformers' chat-template
rendering, i.e. jinja2 configured as transformers configures it
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, a
{% generation %} tag rendering its body, tojson = json.dumps(ensure_ascii=False),
raise_exception and strftime_now), with the request turned into variables as
kvinfer does (tool-call arguments given as JSON strings parsed, tools None when
absent, add_generation_prompt True when absent, chat_template_kwargs merged),
and message content in the form the template expects, as vLLM decides it
(detect_content_format: "openai", the list of parts, when some for loop iterates
a message's content in jinja2's own syntax tree, else "string", text parts joined
with "\n"); each result also names that form ("format").

usage: jinja_ref.py CASES.json  ->  stdout: a JSON list, one {"ok": true, "text": ...}
or {"ok": false, "error": ...} per case; CASES.json is a list of
{"template": PATH, "request": {...}, "bos": str|null, "eos": str|null}, where
"template_text": TEXT may stand for "template" (a snippet given inline).
Exit 3 when jinja2 cannot be imported.
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:  # the C test reports this and skips
    print("jinja2 missing: %s" % e, file=sys.stderr)
    sys.exit(3)


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def _reads(node, name, key=None):
    # name, or name[key] / name.key, maybe through filters, tests or a slice (vLLM's walk)
    while isinstance(node, (nodes.Filter, nodes.Test)) or (
            isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice)):
        node = node.node
        if node is None:
            return False
    if key is None:
        return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == name
    if isinstance(node, nodes.Getitem):
        return (isinstance(node.node, nodes.Name) and node.node.name == name
                and isinstance(node.arg, nodes.Const) and node.arg.value == key)
    if isinstance(node, nodes.Getattr):
        return isinstance(node.node, nodes.Name) and node.node.name == name and node.attr == key
    return False


def _loop_targets(root, names, key=None):
    out = []
    for loop in root.find_all(nodes.For):
        if any(_reads(loop.iter, n, key) for n in names):
            if not isinstance(loop.target, nodes.Name):
                raise ValueError("loop target is not a name")
            out.append(loop.target.name)
    return out


def detect_content_format(env, text):
    """vLLM's _detect_content_format over jinja2's parse of text."""
    try:
        root = env.parse(text)
        msgs = ["messages"]
        q = 0
        while q < len(msgs):
            for a in root.find_all(nodes.Assign):
                if _reads(a.node, msgs[q]):
                    if not isinstance(a.target, nodes.Name):
                        raise ValueError("assignment target is not a name")
                    if a.target.name not in msgs:
                        msgs.append(a.target.name)
            q += 1
        one = _loop_targets(root, msgs)
        return "openai" if _loop_targets(root, one, "content") else "string"
    except Exception:
        return "string"


def join_content(req):
    """The string form: each list content's text parts joined with "\\n"."""
    req = dict(req)
    msgs = []
    for m in req["messages"]:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list):
            texts = []
            for p in c:
                t = p.get("type")
                if t in ("text", "input_text"):
                    texts.append(p["text"])
                elif t == "refusal":
                    texts.append(p["refusal"])
                else:
                    raise ValueError("not a text part: %r" % (t,))
            m = dict(m)
            m["content"] = "\n".join(texts)
        msgs.append(m)
    req["messages"] = msgs
    return req


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def prepare(req, bos, eos):
    v = {}
    if bos is not None:
        v["bos_token"] = bos
    if eos is not None:
        v["eos_token"] = eos
    v.update(req.get("chat_template_kwargs") or {})
    msgs = []
    for m in req["messages"]:
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            m = dict(m)
            new = []
            for tc in calls:
                fn = tc.get("function") if isinstance(tc, dict) else None
                a = fn.get("arguments") if isinstance(fn, dict) else None
                if isinstance(a, str):
                    try:
                        parsed = json.loads(a)
                        tc = dict(tc)
                        tc["function"] = dict(fn)
                        tc["function"]["arguments"] = parsed
                    except ValueError:
                        pass
                new.append(tc)
            m["tool_calls"] = new
        msgs.append(m)
    v["messages"] = msgs
    v["tools"] = req.get("tools")
    cont = req.get("continue_final_message", False)
    if cont and req.get("add_generation_prompt") is True:
        raise ValueError("continue_final_message and add_generation_prompt cannot both be true")
    v["add_generation_prompt"] = req.get("add_generation_prompt", not cont)
    return v


def continue_final(text, req):
    """transformers' apply_chat_template(continue_final_message=True): the
    rendering ends right after the final message's text."""
    final = req["messages"][-1]["content"]
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if "text" in block:
                final = block["text"]
                break
        else:
            raise ValueError("continue_final_message: no text in the final message")
    if final.strip() not in text:
        raise ValueError("continue_final_message: the final message does not appear in the rendered chat")
    loc = text.rindex(final.strip())
    if text[loc : loc + len(final.lstrip())] == final:
        return text[: loc + len(final.lstrip())]
    return text[: loc + len(final.strip())]


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = make_env()
    compiled = {}
    formats = {}
    out = []
    for c in cases:
        fmt = "string"
        try:
            key = "\0" + c["template_text"] if "template_text" in c else c["template"]
            if key not in formats:
                if "template_text" in c:
                    formats[key] = detect_content_format(env, c["template_text"])
                else:
                    with open(c["template"], encoding="utf-8", newline="") as f:
                        formats[key] = detect_content_format(env, f.read())
            fmt = c.get("content_format") or formats[key]
            req = join_content(c["request"]) if fmt == "string" else c["request"]
            if "template_text" in c:
                path = "\0" + c["template_text"]
                if path not in compiled:
                    compiled[path] = env.from_string(c["template_text"])
            else:
                path = c["template"]
            if path not in compiled:
                with open(path, encoding="utf-8", newline="") as f:
                    compiled[path] = env.from_string(f.read())
            text = compiled[path].render(**prepare(req, c.get("bos"), c.get("eos")))
            if c["request"].get("continue_final_message"):
                text = continue_final(text, c["request"])
            out.append({"ok": True, "text": text, "format": fmt})
        except Exception as e:  # any template error: the expected result is an error
            out.append({"ok": False, "error": "%s: %s" % (type(e).__name__, e), "format": fmt})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
