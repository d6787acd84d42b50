"""Run agents written for other frameworks here, unchanged (docs/adapters.md).

- :func:`scoped_a2a.adapters.a2a_sdk.from_executor`: an a2a-sdk ``AgentExecutor`` (extra
  ``a2a-sdk``); Google ADK's, Strands', BeeAI's and CrewAI's A2A executors are ones.
- :func:`scoped_a2a.adapters.adk.from_adk`: a Google ADK agent through ADK's ``Runner`` (``adk``).
- :func:`scoped_a2a.adapters.pydantic_ai.from_pydantic_ai`: a pydantic-ai ``Agent``
  (``pydantic-ai``).

Each module imports its framework; this package imports none of them.
"""
