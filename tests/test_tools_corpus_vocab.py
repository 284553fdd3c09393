"""Tests for tools/corpus_vocab.py (a vocabulary cut to a corpus)."""
import tokenization

_CHARACTERS = ["a", "c", "d", "e", "g", "h", "o", "s", "t",
               "##a", "##c", "##d", "##e", "##g", "##h", "##o", "##s", "##t"]
_VOCAB = (["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "dog",
           "cat", "the", "hat"] + _CHARACTERS)


def _run(run_script, tmp_path, size,
         corpus_bytes=b"The cats\ncat dog the\n\nthe\n"):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(p + "\n" for p in _VOCAB))
  corpus = tmp_path / "corpus.txt"
  # Under the source vocabulary: the x3, cat x2, ##s x1, dog x1, hat x0.
  corpus.write_bytes(corpus_bytes)
  output = tmp_path / "out.txt"
  result = run_script("tools/corpus_vocab.py", [
      "--vocab_file=%s" % vocab, "--input_file=%s" % corpus,
      "--output_file=%s" % output, "--size=%d" % size], 120)
  return result, output


def test_keeps_specials_characters_and_the_most_used_pieces(tmp_path,
                                                           run_script):
  required = 5 + len(_CHARACTERS)   # [unused0] is not special here.
  result, output = _run(run_script, tmp_path, required + 2)
  assert result.returncode == 0, result.stderr
  assert ("The corpus is 7 pieces, 4 distinct; kept 23 special and "
          "one-character pieces and the 2 most used others.") in result.stderr
  kept = output.read_text().split("\n")[:-1]
  # "the" (3 uses) and "cat" (2), in the source order; not dog, hat, [unused0].
  assert kept == (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat", "the"]
                  + _CHARACTERS)
  tokenizer = tokenization.FullTokenizer(str(output), do_lower_case=True)
  # A word whose piece was dropped falls back on its characters.
  assert tokenizer.tokenize("the dogs") == ["the", "d", "##o", "##g", "##s"]


def test_a_size_below_the_required_pieces_is_one_line_and_no_file(
    tmp_path, run_script):
  result, output = _run(run_script, tmp_path, 10)
  assert result.returncode == 2, result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert "--size=10 is below the 23 special and one-character pieces" in last
  assert "Traceback" not in result.stderr
  assert not output.exists()


def test_a_line_that_is_not_utf8_is_named_in_one_line(tmp_path, run_script):
  result, output = _run(run_script, tmp_path, 30,
                        corpus_bytes=b"the cat\ndog \xe9t\n")
  assert result.returncode == 2, result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert "corpus.txt:2: byte 0xe9 at column 5 is not UTF-8" in last
  assert "Traceback" not in result.stderr
  assert not output.exists()
