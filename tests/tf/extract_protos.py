#!/usr/bin/env python3
"""Writes TensorFlow's GraphDef .proto files (and what they import) under
schemas/tensorflow/, rebuilt from the descriptors compiled into the tensorflow-cpu
wheel (tensorflow/core/framework/*_pb2.py; the wheel ships no .proto sources).

Messages, fields, numbers, types, labels, oneofs, maps, enums, reserved ranges and the
`deprecated` / `packed` options are kept; comments and file options (java_package,
go_package, ...) are not, since the wheel does not carry comments and the options do
not change the wire format.

Run with the fixture venv's python: /work/venvs/tf/bin/python tests/tf/extract_protos.py
"""
import os
import sys

from google.protobuf import descriptor_pb2
from tensorflow.core.framework import graph_pb2

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas", "tensorflow")

SCALARS = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
    7: "fixed32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32",
    16: "sfixed64", 17: "sint32", 18: "sint64",
}


def type_name(f):
    if f.type in (11, 14):  # message, enum
        return f.type_name
    return SCALARS[f.type]


def field_options(f):
    opts = []
    if f.options.HasField("deprecated"):
        opts.append("deprecated = %s" % ("true" if f.options.deprecated else "false"))
    if f.options.HasField("packed"):
        opts.append("packed = %s" % ("true" if f.options.packed else "false"))
    return " [%s]" % ", ".join(opts) if opts else ""


def reserved(m, ind, out):
    for r in m.reserved_range:
        end = r.end - 1
        out.append("%sreserved %s;" % (ind, r.start if end == r.start else "%d to %d" % (r.start, end)))
    if m.reserved_name:
        out.append("%sreserved %s;" % (ind, ", ".join('"%s"' % n for n in m.reserved_name)))


def enum(e, ind, out):
    out.append("%senum %s {" % (ind, e.name))
    if e.options.HasField("allow_alias"):
        out.append("%s  option allow_alias = true;" % ind)
    reserved(e, ind + "  ", out)
    for v in e.value:
        opt = " [deprecated = true]" if v.options.deprecated else ""
        out.append("%s  %s = %d%s;" % (ind, v.name, v.number, opt))
    out.append("%s}" % ind)


PROTO2 = [False]


def label_of(f):
    if f.label == 3:
        return "repeated "
    if f.label == 2:
        return "required "
    if PROTO2[0] or f.proto3_optional:
        return "optional "
    return ""


def default_of(f):
    return ' [default = %s]' % (('"%s"' % f.default_value) if f.type == 9 else f.default_value) if f.HasField("default_value") else ""


def message(m, ind, out):
    out.append("%smessage %s {" % (ind, m.name))
    inner = ind + "  "
    maps = {n.name: n for n in m.nested_type if n.options.map_entry}
    reserved(m, inner, out)
    for e in m.enum_type:
        enum(e, inner, out)
    for n in m.nested_type:
        if not n.options.map_entry:
            message(n, inner, out)
    real_oneofs = [i for i, _ in enumerate(m.oneof_decl)
                   if not any(f.HasField("oneof_index") and f.oneof_index == i and f.proto3_optional
                              for f in m.field)]
    done_oneofs = set()
    for f in m.field:
        if f.HasField("oneof_index") and f.oneof_index in real_oneofs:
            i = f.oneof_index
            if i in done_oneofs:
                continue
            done_oneofs.add(i)
            out.append("%soneof %s {" % (inner, m.oneof_decl[i].name))
            for g in m.field:
                if g.HasField("oneof_index") and g.oneof_index == i:
                    out.append("%s  %s %s = %d%s;" % (inner, type_name(g), g.name, g.number, field_options(g)))
            out.append("%s}" % inner)
            continue
        entry = f.type_name.rsplit(".", 1)[-1] if f.type == 11 else None
        if f.label == 3 and entry in maps and f.type_name.endswith(m.name + "." + entry):
            k, v = maps[entry].field
            out.append("%smap<%s, %s> %s = %d%s;" % (inner, type_name(k), type_name(v), f.name, f.number, field_options(f)))
            continue
        out.append("%s%s%s %s = %d%s%s;" % (inner, label_of(f), type_name(f), f.name, f.number, default_of(f), field_options(f)))
    out.append("%s}" % ind)


def write(fd):
    p = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(p)
    PROTO2[0] = (p.syntax or "proto2") == "proto2"
    out = [
        "// Rebuilt from the descriptor in TensorFlow's tensorflow-cpu wheel by",
        "// tests/tf/extract_protos.py (Apache-2.0, see schemas/tensorflow/LICENSE-NOTE.md).",
        "// Comments and file options are not in the wheel; the wire format is the original's.",
        "",
        'syntax = "%s";' % (p.syntax or "proto2"),
        "",
        "package %s;" % p.package,
        "",
    ]
    for d in p.dependency:
        out.append('import "%s";' % d)
    if p.dependency:
        out.append("")
    for e in p.enum_type:
        enum(e, "", out)
        out.append("")
    for m in p.message_type:
        message(m, "", out)
        out.append("")
    path = os.path.join(OUT, p.name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(out).rstrip("\n") + "\n")
    return p.name


def walk(fd, seen):
    if fd.name in seen:
        return
    seen.add(fd.name)
    for d in fd.dependencies:
        walk(d, seen)
    print(write(fd), file=sys.stderr)


if __name__ == "__main__":
    walk(graph_pb2.DESCRIPTOR, set())
