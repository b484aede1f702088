"""The loop before a dump exists: `postmortem capture` and `postmortem trigger`.

`environment` plans the coredump variables (pure), `child` runs the command and keeps what
it prints, `dumps` expands the driver's name patterns and finds what was written, `trigger`
writes to a coredump pipe, and `command` ties them to the analysis and the reports.
"""
