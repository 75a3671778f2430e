"""The Cloudflare Worker: the edge HTTP entry in front of the per-world Durable Objects."""
