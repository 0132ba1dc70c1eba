#!/usr/bin/env python3
"""Checks live responses against docs/openapi.json.

Usage: check_openapi.py OPENAPI.json RESPONSES.json
RESPONSES.json: [{"path": "/v1/auth", "method": "post", "status": 200, "contentType": "...", "body": <JSON or null>}, ...]
The document itself must be a valid OpenAPI 3.1 document; every response must be documented for
its path, method and status, with its content type; JSON bodies must match the schema.
Prints one line per response and 'N passed, N failed'; exits 1 on any failure.
"""
import json, sys
from openapi_spec_validator import validate
from openapi_schema_validator import OAS31Validator

spec = json.load(open(sys.argv[1]))
validate(spec)
responses = json.load(open(sys.argv[2]))
passed = failed = 0
for r in responses:
    label = f'{r["method"].upper()} {r["path"]} {r["status"]}'
    try:
        operation = spec["paths"][r["path"]][r["method"]]
        documented = operation["responses"].get(str(r["status"]))
        if documented is None:
            raise AssertionError("status not documented")
        if "$ref" in documented:
            documented = spec["components"]["responses"][documented["$ref"].split("/")[-1]]
        content_type = r["contentType"].split(";")[0].strip()
        if content_type not in documented.get("content", {}):
            raise AssertionError(f"content type {content_type} not documented")
        schema = documented["content"][content_type]["schema"]
        if r.get("body") is not None:
            # The schema with the document's components beside it, so "#/components/…" resolves.
            OAS31Validator(dict(schema, components=spec["components"])).validate(r["body"])
        print(f"ok   {label}")
        passed += 1
    except Exception as error:  # noqa: BLE001 - every failure is reported
        print(f"FAIL {label}: {str(error).splitlines()[0][:300]}")
        failed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
