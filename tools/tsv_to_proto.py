#!/usr/bin/env python3
"""Writes a proto3 file from one CRI schema fact table (tests/schema/*.tsv).

The .proto files under proto/ were produced with this script and are checked in;
tests/schema.rs compares the compiled descriptors with the same tables row by row.
Usage: tools/tsv_to_proto.py tests/schema/v1.tsv runtime.v1 > proto/v1/api.proto
"""
import csv
import sys

# Fields marked `[debug_redact = true]` upstream (cri-api v0.34.0 on): secrets, never to be logged.
# The tables do not record field options other than `deprecated`, so they are named here.
DEBUG_REDACT = {
    "runtime.v1.AuthConfig.password",
    "runtime.v1.AuthConfig.auth",
    "runtime.v1.AuthConfig.identity_token",
    "runtime.v1.AuthConfig.registry_token",
}

VERSION_NOTE = {
    "runtime": "v1alpha1 (Kubernetes <= 1.9)",
    "runtime.v1alpha2": "v1alpha2 (Kubernetes 1.10 - 1.25)",
    "runtime.v1": "v1 (Kubernetes 1.20+)",
}


def short(name, pkg):
    return name[len(pkg) + 1:] if name.startswith(pkg + ".") else name


def main(path, pkg):
    rows = list(csv.reader(open(path), delimiter="\t"))[1:]
    order, messages, enums, services = [], {}, {}, {}
    for kind, full, number, typ, label, extra in rows:
        name = short(full, pkg)
        if kind == "message":
            messages[name] = []
            order.append(("message", name))
        elif kind == "enum":
            enums[name] = []
            if "." not in name:
                order.append(("enum", name))
        elif kind == "enumvalue":
            enums[name.rsplit(".", 1)[0]].append((name.rsplit(".", 1)[1], number))
        elif kind == "field":
            owner, field = name.rsplit(".", 1)
            messages[owner].append((field, int(number), typ, label, extra))
        elif kind == "service":
            services[name] = []
            order.append(("service", name))
        elif kind == "rpc":
            svc, method = name.rsplit(".", 1)
            attrs = dict(kv.split("=") for kv in extra.split(";"))
            services[svc].append((method, attrs))

    out = [
        "// CRI %s, written from tests/schema/%s." % (VERSION_NOTE[pkg], path.rsplit("/", 1)[-1]),
        'syntax = "proto3";',
        "",
        "package %s;" % pkg,
        "",
    ]

    def type_ref(typ, scope):
        if typ.startswith("map<"):
            k, v = typ[4:-1].split(",")
            return "map<%s, %s>" % (type_ref(k, scope), type_ref(v, scope))
        name = short(typ, pkg)
        if scope and name.startswith(scope + "."):
            return name[len(scope) + 1:]  # a type nested in this message
        return name

    def enum_block(name, indent):
        pad = "  " * indent
        lines = ["%senum %s {" % (pad, name.rsplit(".", 1)[-1])]
        for value, number in enums[name]:
            lines.append("%s  %s = %s;" % (pad, value, number))
        lines.append(pad + "}")
        return lines

    for kind, name in order:
        if kind == "enum":
            out += enum_block(name, 0) + [""]
        elif kind == "message":
            out.append("message %s {" % name)
            for nested in [e for e in enums if e.startswith(name + ".")]:
                out += enum_block(nested, 1)
            for field, number, typ, label, extra in messages[name]:
                prefix = "repeated " if label == "repeated" else ""
                opts = " [deprecated = true]" if extra == "deprecated" else ""
                if "%s.%s.%s" % (pkg, name, field) in DEBUG_REDACT:
                    opts = " [debug_redact = true]"
                out.append("  %s%s %s = %d%s;" % (prefix, type_ref(typ, name), field, number, opts))
            out += ["}", ""]
        else:
            out.append("service %s {" % name)
            for method, attrs in services[name]:
                stream = "stream " if attrs.get("server_streaming") == "true" else ""
                out.append(
                    "  rpc %s(%s) returns (%s%s) {}"
                    % (method, type_ref(attrs["request"], ""), stream, type_ref(attrs["response"], ""))
                )
            out += ["}", ""]
    sys.stdout.write("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
