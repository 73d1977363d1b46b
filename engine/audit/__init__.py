"""The oversight record (DESIGN §16, docs/audit.md): what lets an auditor check, offline, what
signoff kept: signed receipts of decisions (:mod:`.receipts`: their form, signature and checks,
pure), the signing keys in the secret store (:mod:`.keys`) and the event log's hash chain
(:mod:`.events`)."""
