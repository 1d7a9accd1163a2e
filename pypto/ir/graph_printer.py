"""Readable dumps of a TensorGraph: a jaxpr-like listing and Graphviz DOT."""
from __future__ import annotations

import sympy


def fmt_value(info) -> str:
    if isinstance(info, (list, tuple)):
        return "(" + ", ".join(fmt_value(i) for i in info) + ")"
    return f"{info.dtype}[{', '.join(str(d) for d in info.shape)}]"


def fmt_attr(v) -> str:
    if hasattr(v, "nodes") and hasattr(v, "inputs"):      # a body graph
        return "<body>"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt_attr(x) for x in v) + "]"
    if hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, sympy.Basic):   # torch tensor
        return f"tensor{list(v.shape)}"
    return str(v)


def _lines(g, indent: int):
    pad = "  " * indent
    for nid in g.nodes():
        n = g.node(nid)
        if n["op"] == "input":
            continue
        attrs = {k: v for k, v in n["attrs"].items() if k not in ("body",)}
        a = (" {" + ", ".join(f"{k}={fmt_attr(v)}" for k, v in attrs.items()) + "}") if attrs else ""
        args = ", ".join(f"%{i}" for i in n["inputs"])
        text = f"{pad}%{nid}: {fmt_value(n['out'])} = {n['op']}({args}){a}"
        loc = f"  # {n['loc']}" if n["loc"] else ""
        yield f"{text:<90}{loc}" if loc else text
        if n["op"] == "loop":
            body = n["attrs"]["body"]
            ins = ", ".join(f"%{i}" for i in body.inputs)
            yield f"{pad}  body({ins}) -> ({', '.join('%' + str(o.node) for o in body.outputs)}):"
            yield from _lines(body, indent + 2)


def print_graph(g) -> str:
    params = ", ".join(f"%{i}: {fmt_value(g.info(i))}" for i in g.inputs)
    outs = ", ".join(f"%{o.node}" + {"return": "", "inplace": f"->in{o.index}"}.get(o.kind, f"->{o.kind}")
                     for o in g.outputs)
    syms = f"  sizes({', '.join(str(s) for s in g.symbols)})" if g.symbols else ""
    return "\n".join([f"graph {g.name}({params}) -> ({outs}){syms}:", *_lines(g, 1)])


def to_dot(g) -> str:
    lines = [f'digraph "{g.name}" {{', "  node [shape=box, fontname=monospace];"]
    for nid in g.nodes():
        n = g.node(nid)
        label = f"%{nid} {n['op']}\\n{fmt_value(n['out'])}"
        shape = ', shape=ellipse' if n["op"] == "input" else ""
        lines.append(f'  n{nid} [label="{label}"{shape}];')
    for a, b in g.nx.edges:
        lines.append(f"  n{a} -> n{b};")
    lines.append("}")
    return "\n".join(lines)
