"""Pictures of a report: one self-contained HTML page (``--html FILE``) and collapsed stacks (``--folded``).

``page.py`` is the page model every verb's report is turned into (``stacks_page``, ``fr_page``,
``net_page``: pure adapters), ``html.py`` the one writer of that model as a page with its styles
and scripts inline, ``folded.py`` the collapsed-stacks lines flame-graph tools read.
"""
