"""Self-contained HTML reports (inline CSS + SVG, no script, no fetches): the layer map.

``render_policy_html(PolicyReport)`` is ``ckpt inspect --format html``;
``render_validate_html(ValidateReport, PolicyReport | None)`` is ``ckpt validate --format html``.
"""
