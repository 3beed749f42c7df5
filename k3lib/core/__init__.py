"""The foundation every layer stands on: errors, parameters, the run folder, the target, the evidence
record model, the outcome table and the axis context. Imports nothing of the kit above it."""
