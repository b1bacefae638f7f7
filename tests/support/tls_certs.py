#!/usr/bin/env python3
"""Test certificates made with the `openssl` command-line tool (no Python
crypto package needed), in a directory of the caller's.

    certs = TlsCerts(tmp_dir)            # a CA, nothing else yet
    server = certs.issue("server", dns=["localhost"], ips=["127.0.0.1"])
    client = certs.issue("client", client=True)
    expired = certs.issue("old", dns=["localhost"], expired=True)
    other = TlsCerts(tmp_dir / "other")  # another CA: "the wrong CA"

`issue` returns a Cert(cert=PATH, key=PATH) signed by this CA. Keys are EC
P-256 (fast to make); files are mode 0600 in a 0700 directory. As a program:

    tests/support/tls_certs.py DIR      # a CA and a localhost/127.0.0.1 server cert
"""

from __future__ import annotations

import argparse
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cert:
    cert: Path
    key: Path


def openssl(*args: str, cwd: Path | None = None) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{result.stderr.decode()}")


class TlsCerts:
    """A certificate authority in `directory`, and the certificates it issues."""

    def __init__(self, directory: Path, name: str = "pt2cache test CA"):
        self.dir = Path(directory)
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.ca_key = self.dir / "ca.key"
        self.ca = self.dir / "ca.pem"
        self._serial = 0
        self._new_key(self.ca_key)
        openssl("req", "-x509", "-new", "-key", str(self.ca_key), "-out", str(self.ca),
                "-days", "30", "-sha256", "-subj", f"/CN={name}",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def _new_key(self, path: Path) -> None:
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", str(path))
        os.chmod(path, 0o600)

    def issue(self, label: str, dns: list[str] = (), ips: list[str] = (), client=False,
              expired=False, both=False) -> Cert:
        """A certificate for `label` (its CN) with these subject alternative
        names, for a server (default), a client, or `both` (a Redis Cluster
        node, which is also a TLS client of the other nodes' cluster bus);
        `expired`: valid only in 2020."""
        key = self.dir / f"{label}.key"
        cert = self.dir / f"{label}.pem"
        csr = self.dir / f"{label}.csr"
        self._new_key(key)
        openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={label}")
        san = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        ext = self.dir / f"{label}.ext"
        lines = ["[ext]", "basicConstraints=critical,CA:FALSE",
                 "keyUsage=critical,digitalSignature,keyEncipherment",
                 "extendedKeyUsage=" + ("serverAuth,clientAuth" if both else
                                        "clientAuth" if client else "serverAuth")]
        if san:
            lines.append("subjectAltName=" + ",".join(san))
        ext.write_text("\n".join(lines) + "\n")
        if expired:
            self._sign_with_dates(csr, cert, ext, "20200101000000Z", "20200102000000Z")
        else:
            self._serial += 1
            openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey",
                    str(self.ca_key), "-set_serial", str(self._serial), "-days", "30",
                    "-sha256", "-extfile", str(ext), "-extensions", "ext", "-out", str(cert))
        return Cert(cert, key)

    def _sign_with_dates(self, csr: Path, cert: Path, ext: Path, start: str, end: str) -> None:
        """`openssl x509` of OpenSSL 3.0 cannot set dates in the past; `openssl
        ca` can, with a minimal configuration."""
        db = self.dir / "ca-db"
        db.mkdir(mode=0o700, exist_ok=True)
        (db / "index.txt").write_text("")
        config = db / "ca.cnf"
        config.write_text(f"""[ca]
default_ca = test_ca
[test_ca]
database = {db}/index.txt
new_certs_dir = {db}
rand_serial = yes
default_md = sha256
policy = anything
unique_subject = no
[anything]
commonName = supplied
""")
        openssl("ca", "-batch", "-config", str(config), "-cert", str(self.ca), "-keyfile",
                str(self.ca_key), "-in", str(csr), "-out", str(cert), "-notext",
                "-startdate", start, "-enddate", end, "-extfile", str(ext), "-extensions", "ext")


def redis_tls_args(port: int, server: Cert, ca: Path, auth_clients: bool = False) -> list[str]:
    """redis-server arguments: TLS on 127.0.0.1:`port`, no plain TCP port (the
    Unix socket of pt2harness.RedisServer stays plain, for test set-up)."""
    return ["--tls-port", str(port), "--tls-cert-file", str(server.cert),
            "--tls-key-file", str(server.key), "--tls-ca-cert-file", str(ca),
            "--tls-auth-clients", "yes" if auth_clients else "no"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    args = parser.parse_args()
    certs = TlsCerts(args.directory)
    server = certs.issue("server", dns=["localhost"], ips=["127.0.0.1"])
    print(f"CA {certs.ca}\nserver {server.cert} {server.key}")


if __name__ == "__main__":
    main()
