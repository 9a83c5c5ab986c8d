"""The parity scenario suite: every rule of docs/rules.md, run against every driver."""
