"""The axes: each measures one thing and turns it into findings and one evidence record. An axis package has
the same role modules: `config` (its parameters), `run` (drives the measurement), `judge` (findings, pure) and
`figures` (plots and tables). Stands on `core` and `io`."""
