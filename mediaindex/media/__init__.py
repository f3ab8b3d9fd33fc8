"""Media files: probing, decoding, shots, frame sampling, thumbnails and the ffmpeg commands."""
