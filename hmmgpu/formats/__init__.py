"""Input and output formats: HMM files, sequence files and made databases, output files that appear whole."""
