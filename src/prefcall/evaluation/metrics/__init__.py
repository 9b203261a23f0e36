"""Pure metric functions (no model, no I/O besides loading the alias map): NLSI calls, TAPS tags, SGD DST."""
