"""`k3 sign` and `k3 verify`: the reviewer's signature over a run's manifest, and the check of every file, the
signature and the archived PDF against it."""

from __future__ import annotations

import argparse

from ..report.signing import SSH_SIG, sign_run, verify_run


def cmd_sign(ns: argparse.Namespace) -> int:
    """`k3 sign RUN --reviewer NAME [--key FILE] [--identity ID] [--force] [--demo]`."""

    record = sign_run(ns.run, ns.reviewer, key=getattr(ns, "key", None), identity=getattr(ns, "identity", None),
                      force=bool(getattr(ns, "force", False)), demo=bool(getattr(ns, "demo", False)))
    print(f"signed {record.run_id}: decision {record.decision}{' (demo)' if record.demo else ''}, reviewer "
          f"{record.reviewer}, "
          f"manifest sha256 {record.manifest_sha256}")
    print("ssh signature: " + (f"{SSH_SIG} ({record.key_fingerprint})" if record.namespace else "none (no --key)"))
    return 0


def cmd_verify(ns: argparse.Namespace) -> int:
    """`k3 verify RUN [--allowed-signers FILE]`: 0 when every file and the signature match, 1 otherwise."""

    result = verify_run(ns.run, allowed_signers=getattr(ns, "allowed_signers", None))
    for line in result.lines():
        print(line)
    return result.exit_code
