#!/usr/bin/env python3
"""Renders the cases in cases.json the way Hugging Face transformers'
apply_chat_template does, and writes each expected prompt to NAME.txt
(or NAME.error with the exception's message).

The environment is transformers' (chat_template_utils._compile_jinja_template):
jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
the loopcontrols extension, tojson as json.dumps(ensure_ascii=False), and the
raise_exception and strftime_now globals. The template gets messages,
tools (None when there are none), documents (None), add_generation_prompt,
the tokenizer's special tokens and the case's kwargs, as
apply_chat_template(..., **kwargs) passes them.

Run with jinja2 3.1: python3 render_hf.py
"""
import json
import os
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def compile_template(src):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(src)


def main():
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    for c in cases:
        with open(os.path.join(HERE, "..", "templates", c["template"]), encoding="utf-8") as f:
            tmpl = compile_template(f.read())
        special = {}
        if c["bos"]:
            special["bos_token"] = c["bos"]
        if c["eos"]:
            special["eos_token"] = c["eos"]
        kwargs = dict(special)
        kwargs.update(c.get("kwargs", {}))
        base = os.path.join(HERE, c["name"])
        try:
            out = tmpl.render(messages=c["messages"], tools=c.get("tools"), documents=None,
                              add_generation_prompt=c["add_generation_prompt"], **kwargs)
        except jinja2.exceptions.TemplateError as e:
            if not c.get("error"):
                raise
            with open(base + ".error", "w", encoding="utf-8") as f:
                f.write(str(e))
            continue
        if c.get("error"):
            raise SystemExit(c["name"] + ": expected an exception")
        with open(base + ".txt", "w", encoding="utf-8") as f:
            f.write(out)


if __name__ == "__main__":
    main()
