"""What both the command line and the console print: summaries, history tables, cost
breakdowns, compare tables — text rendering and the stored queries behind it."""
