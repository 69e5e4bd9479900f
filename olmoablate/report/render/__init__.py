"""report.render: the built report as something to read.

Owns: the document model (``document``: sections, rows and verdict cards), the gate's statistics
in words (``gate_text``), plots (``plots``), the writers of report.md / report.html /
comparison.csv / gate.json and the terminal block (``writers``, Jinja2 templates under
``templates/``), and the board's renderers (``board_render``).

May import: every other report layer (``gate``, ``compare``, ``read``) and the orchestration's
``Report`` type (``report.build``). Nothing imports ``render`` except the command and the CLI.
"""
