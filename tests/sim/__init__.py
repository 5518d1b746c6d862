"""A deterministic simulation of the run lifecycle (see docs/simulation.md)."""
