"""One plain class per ingestion stage (decode, speech, vision, summary, embed) and the item they pass on."""
