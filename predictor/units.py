"""Unit conversions, named once (STYLE.md rule 7: names carry units)."""

US_PER_MS = 1e3
US_PER_S = 1e6
MS_PER_S = 1e3
S_PER_MS = 1e-3
BYTES_PER_GB = 1e9
BYTES_PER_GIB = 2 ** 30
NS_PER_MS = 1e6
