#!/usr/bin/env python3
"""Asks a running `tokentool serve` for a certificate and writes its chain's first two
certificates, the leaf and its issuer, as DIR/leaf.pem and DIR/issuer.pem (for openssl ocsp).

Usage: scripts/issue_leaf.py BASE_URL TOKEN CSR_FILE DIR   (the dev provider's token, a PEM CSR)
Used by scripts/api_fuzz.sh and scripts/revocation_load.sh.
"""
import json
import sys
import urllib.request

base, token, csr, work = sys.argv[1:]
body = json.dumps({"provider": "dev", "token": token, "csr": open(csr).read()}).encode()
request = urllib.request.Request(f"{base}/v1/certificates", body, {"content-type": "application/json"})
chain = json.load(urllib.request.urlopen(request, timeout=30))["certificate"]
leaf, issuer = ["-----BEGIN CERTIFICATE-----" + pem for pem in chain.split("-----BEGIN CERTIFICATE-----")[1:3]]
open(f"{work}/leaf.pem", "w").write(leaf)
open(f"{work}/issuer.pem", "w").write(issuer)
