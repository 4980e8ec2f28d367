"""What every store that talks over a network shares, once.

- ``requests``: the request layer: each call's budget, its retries with jittered backoff, and
  its doubt (a try that may have reached the store unanswered), per call and per step.
- ``link``: what a backend gives: a *link* (connect, send one call, interrupt a call stuck on
  the wire, translate its errors), and the ``Translated`` form of an error.
- ``connected``: one try on the wire, sent by the caller's own thread through the store's one
  cached connection, bounded by its deadline (``deadline``: one watchdog thread per process
  interrupts a try that outlives it) and behind the *gate*: a try whose deadline passed before
  it was sent is never sent.
- ``worker``: the same bound for a link that cannot be interrupted (botocore's HTTP): the try
  runs in a long-lived request thread, and one given up is left to it.
- ``facade``: the ``LockStore`` of a store whose every lock step is one server-side call
  (PostgreSQL's step function, Redis's script): a backend adds its *step program* (what a step
  sends, and its answer in the shared form) and the calls that are not steps (scans, audit).
- ``answers``: a step's answer, in the shared form, as the library's records and outcomes.

Nothing here imports a driver or a backend; a backend imports this, never another backend.
An asynchronous transport adds a link and a sender beside ``connected``: the step programs,
the gate rule (``connected.gate_open``) and the answer decoding are shared as they are.
"""
