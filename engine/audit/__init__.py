"""The oversight record (DESIGN §16, docs/audit.md): signed receipts of decisions
(:mod:`.receipts`: their form, signature and checks, pure) and the signing keys in the secret
store (:mod:`.keys`)."""
