"""One-off acceptance runs of the issues, each writing a dated JSON under bench/results/."""
