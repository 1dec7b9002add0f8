"""The operator's coverage page (issue 27): server-rendered HTML with inline SVG under ``/ui/``.

    data      what a page shows, gathered through the reader calls the ``/v1`` JSON routes make
              (the one module to re-point at another source of partitions)
    handoffs  where each consumption mode would switch tiers, by driving the SDK's ``Handoff``
    svg       offset and time axes, and one bar per partition (pure: geometry and markup)
    pages     the HTML pages (pure: views in, text out)

The routes are ``tiered_kafka_gateway.routes.ui``; authentication is the API's (``deps``), so a
token sees only the topics its patterns cover.
"""

UI_PREFIX = "/ui"
"""Where the pages are served (``make run`` prints ``{gateway}/ui/``)."""
