"""prefcall.tagging: the TAPS tag language (parse, serialise, validate, tags to calls)."""
