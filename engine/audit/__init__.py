"""The oversight record (DESIGN §16): what lets an auditor check, offline, what signoff kept."""
