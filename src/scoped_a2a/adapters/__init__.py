"""Run agents written for other frameworks here, unchanged (docs/adapters.md).

- :func:`scoped_a2a.adapters.a2a_sdk.from_executor`: an a2a-sdk ``AgentExecutor`` of the
  installed generation: 1.x (extra ``a2a-sdk``; Google ADK's and Agent Framework's executors)
  or 0.3 (extras ``strands``, ``beeai``, ``crewai``, ``a2a-sdk-03``: Strands' ``A2AServer`` or
  executor, BeeAI's executors, a CrewAI ``Agent``), in an environment of its own.
- :func:`scoped_a2a.adapters.adk.from_adk`: a Google ADK agent through ADK's ``Runner`` (``adk``).
- :func:`scoped_a2a.adapters.pydantic_ai.from_pydantic_ai`: a pydantic-ai ``Agent``
  (``pydantic-ai``).

Each module imports its framework; this package imports none of them.
"""
