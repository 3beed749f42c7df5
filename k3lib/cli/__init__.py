"""The `k3` command: argument parsing and printing; each command imports what it runs on first use."""
