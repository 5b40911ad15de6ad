"""Durable intent journal for side-effecting tools (BRIEF.md §6). See ``api`` for the seam."""
