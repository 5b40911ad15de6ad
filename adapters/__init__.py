"""Adapters that give LangChain / LangGraph and AutoGen code agentrt tagging and tools."""
