"""Benchmarking an OpenAI-compatible LLM server over HTTP: a streaming client, load modes,
workloads, goodput, SLO attainment and a capacity search (``run.py --endpoint``).

Terms, on the client's monotonic clock (``time.perf_counter_ns``), per request:
  sent        when the request's first byte was handed to the connection.
  token event an SSE event carrying a choice with generated text (one token per event on
              vLLM, SGLang and llama.cpp; a server may pack several); the finish event too,
              when no event before it carried text (the reply's text was empty, or merged
              into that one event).
  TTFT        first token event - sent.
  ITL         every gap between consecutive token events of a request.
  TPOT        (last token event - first token event) / (output tokens - 1); undefined for 1
              output token or for one token event.
  E2E         the end of the stream ([DONE]) - sent.
  tokens      counted by the tokenizer when one is given, else by the server's ``usage``, else
              (neither) by the token events; ``token_source`` says which.
"""
