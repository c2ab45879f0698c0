"""Remote model code: approving a model's own Python by fingerprint, and checking a run against the approvals."""
