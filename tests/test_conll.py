"""Tests for tasks/conll.py: reading CoNLL-2003 files as distributed, and
entity scores by conlleval's definition, on examples worked out by hand."""
import os
import random

import pytest

from tasks import conll

# The start of CoNLL-2003's training file in the original release (IOB1):
# token, part of speech, chunk, entity tag.
IOB1_TEXT = """-DOCSTART- -X- O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
. . O O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- O O

BRUSSELS NNP I-NP I-LOC
1996-08-22 CD I-NP O
"""

# The same in the IOB2 (BIO) form other distributions use.
IOB2_TEXT = IOB1_TEXT.replace("I-ORG", "B-ORG").replace(
    "I-MISC", "B-MISC").replace("Peter NNP I-NP I-PER",
                                "Peter NNP I-NP B-PER").replace(
                                    "I-LOC", "B-LOC")


def _write(tmp_path, text, name="train.txt"):
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  return str(path)


# ----------------------------------------------------------------- reading


@pytest.mark.parametrize("text,scheme", [(IOB1_TEXT, "iob1"),
                                         (IOB2_TEXT, "iob2")])
def test_reads_documents_sentences_tokens_and_tags(tmp_path, text, scheme):
  documents, tagged = conll.read_file(_write(tmp_path, text), scheme)
  assert tagged
  assert [[[w.text for w in s] for s in d] for d in documents] == [
      [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"]],
      [["BRUSSELS", "1996-08-22"]]]
  first = documents[0][0][0]
  assert (first.line, first.tag) == (3, "I-ORG" if scheme == "iob1"
                                     else "B-ORG")
  assert conll.entity_types(documents) == ["LOC", "MISC", "ORG", "PER"]
  assert conll.label_list(["PER", "LOC"]) == ["O", "B-LOC", "I-LOC", "B-PER",
                                              "I-PER"]


def test_two_fields_tabs_no_docstart_and_no_final_newline(tmp_path):
  path = _write(tmp_path, "Ann\tB-PER\nLee\tI-PER\n\n\n\nsmiled\tO")
  documents, _ = conll.read_file(path, "iob2")
  assert [[[(w.text, w.tag) for w in s] for s in d] for d in documents] == [
      [[("Ann", "B-PER"), ("Lee", "I-PER")], [("smiled", "O")]]]


def test_tab_lines_split_at_tabs_others_at_runs_of_spaces(tmp_path):
  # A tab-separated line may hold a space in its token; a space-separated
  # line may hold a no-break space; Windows line ends and trailing blanks
  # are not fields.
  path = _write(tmp_path, "New York\tB-LOC \r\ncity  O\r\n\r\n"
                "10\u00a0000\tO\t\n")
  documents, _ = conll.read_file(path, "iob2")
  assert [[(w.text, w.tag) for w in s] for s in documents[0]] == [
      [("New York", "B-LOC"), ("city", "O")], [("10\u00a0000", "O")]]


def test_missing_file_is_one_line(tmp_path):
  with pytest.raises(ValueError, match=r"nowhere.txt: file not found"):
    conll.read_file(str(tmp_path / "nowhere.txt"), "iob2")


BIOES_TEXT = """Ann S-PER
met O
Bo B-PER
de I-PER
Vries E-PER
in O
New B-LOC
York E-LOC
. O
"""


def test_bioes_reads_and_its_labels_have_four_prefixes(tmp_path):
  documents, _ = conll.read_file(_write(tmp_path, BIOES_TEXT), "bioes")
  assert [w.tag for w in documents[0][0]][:5] == [
      "S-PER", "O", "B-PER", "I-PER", "E-PER"]
  assert conll.label_list(conll.entity_types(documents), "bioes") == [
      "O", "B-LOC", "I-LOC", "E-LOC", "S-LOC",
      "B-PER", "I-PER", "E-PER", "S-PER"]


@pytest.mark.parametrize("text,scheme,message", [
    # BIOES tags read as IOB2.
    ("a S-PER\n", "iob2", r"tag 'S-PER' is not O, B-<type> or I-<type> "
     r"\(--tag_scheme=iob2\)\. If the file is BIOES"),
    # An entity of several words left open at the sentence's end.
    ("a O\nb B-PER\nc I-PER\n", "bioes",
     r"train.txt:3: I-PER is followed by O or a sentence end, but under "
     r"BIOES .* ends with E-PER .*If the file is IOB2, pass "
     r"--tag_scheme=iob2"),
    ("a B-PER\nb O\n", "bioes", r"train.txt:2: B-PER is followed by O"),
    ("a O\nb E-PER\n", "bioes",
     r"train.txt:2: E-PER follows O or a sentence start"),
    ("a S-PER\nb I-PER\nc E-PER\n", "bioes",
     r"train.txt:2: I-PER follows S-PER.*Repair the tag"),
    ("a B-PER\nb E-LOC\n", "bioes", r"train.txt:2: E-LOC follows B-PER"),
    ("a B-PER\nb S-PER\n", "bioes", r"train.txt:2: B-PER is followed by "
     r"S-PER"),
    ("a U-PER\n", "bioes", r"tag 'U-PER' is not O, B-<type>, I-<type>, "
     r"E-<type> or S-<type>.*BILOU"),
])
def test_bioes_problems_are_one_line_errors(tmp_path, text, scheme, message):
  with pytest.raises(ValueError, match=message) as error:
    conll.read_file(_write(tmp_path, text), scheme)
  assert "\n" not in str(error.value)


def test_file_of_tokens_only_is_untagged(tmp_path):
  documents, tagged = conll.read_file(_write(tmp_path, "Ann\nsmiled\n"),
                                      "iob1")
  assert not tagged
  assert [w.tag for w in documents[0][0]] == [None, None]


def test_data_files_by_their_distributed_names(tmp_path):
  for name in ("train.txt", "valid.txt", "eng.testb"):
    _write(tmp_path, "a O\n", name)
  assert [os.path.basename(conll.find_data_file(str(tmp_path), s))
          for s in ("train", "dev", "test")] == ["train.txt", "valid.txt",
                                                  "eng.testb"]
  with pytest.raises(ValueError, match="no dev file .*valid.txt, dev.txt, "
                     "eng.testa"):
    conll.find_data_file(str(tmp_path / "nowhere"), "dev")


@pytest.mark.parametrize("text,scheme,message", [
    ("a NN O\nb NN\n", "iob1",
     r"train.txt:2: found 2 fields, but line 1 has 3\. Every token line"),
    ("a NN PER\n", "iob1",
     r"train.txt:1: tag 'PER' is not O, B-<type> or I-<type> "
     r"\(--tag_scheme=iob1\)\. .*BILOU"),
    ("a NN O\nb NN B-\n", "iob2", r"train.txt:2: tag 'B-' is not O"),
    # IOB2 data read as IOB1: B- after O.
    ("a NN O\nb NN B-PER\n", "iob1",
     r"train.txt:2: B-PER follows O or a sentence start, but under IOB1 .*"
     r"If the file is IOB2, pass --tag_scheme=iob2"),
    # IOB1 data read as IOB2: an entity starting with I-.
    ("a NN I-LOC\n", "iob2",
     r"train.txt:1: an entity starts with I-LOC, but under IOB2 .*"
     r"If the file is IOB1, pass --tag_scheme=iob1"),
    # IOB2: I- of another type than the tag before it.
    ("a NN B-PER\nb NN I-LOC\n", "iob2", r"train.txt:2: an entity starts"),
    # IOB1: B- after an entity of another type.
    ("a NN I-PER\nb NN B-LOC\n", "iob1", r"train.txt:2: B-LOC follows I-PER"),
    ("-DOCSTART- -X- O O\n\n", "iob1", r"train.txt holds no tokens"),
])
def test_bad_lines_are_one_line_errors_naming_file_and_line(
    tmp_path, text, scheme, message):
  with pytest.raises(ValueError, match=message) as error:
    conll.read_file(_write(tmp_path, text), scheme)
  assert "\n" not in str(error.value)


def test_iob1_separates_adjacent_entities_of_one_type(tmp_path):
  documents, _ = conll.read_file(
      _write(tmp_path, "a I-PER\nb B-PER\nc I-PER\n"), "iob1")
  assert [w.tag for w in documents[0][0]] == ["I-PER", "B-PER", "I-PER"]


def test_not_utf8_names_the_line(tmp_path):
  path = tmp_path / "train.txt"
  path.write_bytes(b"a O\nM\xfcller I-PER\n")
  with pytest.raises(ValueError, match=r"train.txt:2: byte 0xfc at column 2 is not UTF-8"):
    conll.read_file(str(path), "iob1")


def test_unknown_tag_of_the_model(tmp_path):
  documents, _ = conll.read_file(_write(tmp_path, "a O\nb B-DATE\n",
                                        "valid.txt"), "iob2")
  with pytest.raises(ValueError, match=r"valid.txt:2: tag B-DATE is not one "
                     r"the model knows \(O, B-PER, I-PER\)"):
    conll.check_known_tags(documents, ["O", "B-PER", "I-PER"], "valid.txt")


# -------------------------------------------------------------- evaluation


def _pairs(gold, guess):
  return list(zip(gold.split(), guess.split()))


def test_partial_match_is_a_wrong_guess_and_a_miss():
  # U.N. official Ekeus heads for Baghdad .
  gold = "B-ORG O B-PER O O B-LOC O"
  guess = "B-ORG O B-PER I-PER O B-LOC O"
  counts = conll.count([_pairs(gold, guess)])
  assert (counts.tokens, counts.correct_tags) == (7, 6)
  assert counts.gold == {"ORG": 1, "PER": 1, "LOC": 1}
  assert counts.guessed == {"ORG": 1, "PER": 1, "LOC": 1}
  assert counts.correct == {"ORG": 1, "LOC": 1}
  results = conll.metrics(counts)
  assert results["eval_precision"] == pytest.approx(2 / 3)
  assert results["eval_recall"] == pytest.approx(2 / 3)
  assert results["eval_f1"] == pytest.approx(2 / 3)
  assert results["eval_accuracy"] == pytest.approx(6 / 7)
  assert (results["eval_f1_PER"], results["eval_f1_LOC"]) == (0.0, 1.0)
  assert (results["eval_gold_PER"], results["eval_predicted_PER"]) == (1, 1)


def test_wrong_type_with_right_boundaries_is_wrong():
  counts = conll.count([_pairs("B-PER I-PER O", "B-ORG I-ORG O")])
  assert (sum(counts.correct.values()), counts.gold["PER"],
          counts.guessed["ORG"]) == (0, 1, 1)
  assert counts.correct_tags == 1


def test_iob1_chunks():
  # I-PER I-PER B-PER: two persons; a guess of one long person is wrong
  # (1 guessed, 2 gold, 0 correct); I-PER after O starts a chunk; a change
  # of type ends one chunk and starts the next.
  assert conll.chunks("I-PER I-PER B-PER O".split()) == [
      ("PER", 0, 2), ("PER", 2, 3)]
  assert conll.chunks("O I-PER I-LOC I-LOC".split()) == [
      ("PER", 1, 2), ("LOC", 2, 4)]
  counts = conll.count([_pairs("I-PER I-PER B-PER O", "I-PER I-PER I-PER O")])
  assert (counts.gold["PER"], counts.guessed["PER"],
          counts.correct["PER"]) == (2, 1, 0)


def test_iob2_and_iob1_spellings_score_the_same():
  # The same entities in both schemes: B-X B-X (IOB2) = I-X B-X (IOB1).
  iob2 = "B-PER B-PER O B-LOC I-LOC"
  iob1 = "I-PER B-PER O I-LOC I-LOC"
  counts = conll.count([_pairs(iob2, iob1)])
  assert counts.correct == {"PER": 2, "LOC": 1}
  assert counts.gold == counts.guessed == {"PER": 2, "LOC": 1}
  assert conll.chunks(iob2.split()) == conll.chunks(iob1.split())


def _render(spans, length, scheme):
  """The tags of entity spans [(type, start, end)] in `scheme`."""
  tags = ["O"] * length
  for entity_type, start, end in spans:
    for index in range(start, end):
      tags[index] = "I-" + entity_type
    if scheme == "bioes":
      if end - start == 1:
        tags[start] = "S-" + entity_type
      else:
        tags[start], tags[end - 1] = "B-" + entity_type, "E-" + entity_type
    else:
      tags[start] = "B-" + entity_type
  return tags


def test_chunks_of_every_scheme_are_the_entities_written():
  # Random entities, adjacent ones of one type included, written in IOB2
  # and in BIOES: both read back as the very spans written.
  rng = random.Random(5)
  for _ in range(300):
    length, spans, position = rng.randint(1, 12), [], 0
    while position < length:
      if rng.random() < 0.5:
        end = min(length, position + rng.randint(1, 3))
        spans.append((rng.choice(["PER", "LOC"]), position, end))
        position = end
      else:
        position += 1
    for scheme in ("iob2", "bioes"):
      assert conll.chunks(_render(spans, length, scheme)) == spans


def test_bioes_adjacent_one_word_entities_stay_two():
  # conlleval's own rules (E- as IOE's end mark, no S-) would read S-PER
  # S-PER as one entity; read as IOB2 it is two, as BIOES means.
  gold = "S-PER S-PER O B-LOC E-LOC B-LOC E-LOC"
  guess = "S-PER B-PER O B-LOC I-LOC I-LOC E-LOC"
  counts = conll.count([_pairs(gold, guess)])
  assert counts.gold == {"PER": 2, "LOC": 2}
  assert counts.guessed == {"PER": 2, "LOC": 1}
  # B-PER alone is read as a one-word entity (conlleval's leniency).
  assert counts.correct == {"PER": 2}
  # Tags are compared as written: B-PER for S-PER, I-LOC for E-LOC and
  # I-LOC for B-LOC are wrong tags.
  assert (counts.tokens, counts.correct_tags) == (7, 4)


def test_iob2_guess_starting_with_i_still_opens_a_chunk():
  # A model may predict I-LOC after O: conlleval reads it as a chunk start.
  counts = conll.count([_pairs("B-LOC I-LOC O", "I-LOC I-LOC O")])
  assert counts.correct == {"LOC": 1}


def test_sentence_breaks_close_chunks():
  # Two sentences each ending/starting with I-PER: two entities, not one.
  sentences = [_pairs("O I-PER", "O I-PER"), _pairs("I-PER O", "I-PER O")]
  counts = conll.count(sentences)
  assert counts.gold == counts.guessed == counts.correct == {"PER": 2}
  assert counts.tokens == 4  # Breaks are not tokens.
  # A guess that ends a chunk one word late across the break is wrong.
  counts = conll.count([_pairs("B-PER O", "B-PER I-PER"),
                        _pairs("O", "O")])
  assert (counts.correct["PER"], counts.gold["PER"],
          counts.guessed["PER"]) == (0, 1, 1)


def test_entity_at_the_end_of_the_corpus_counts():
  counts = conll.count([_pairs("O B-MISC I-MISC", "O B-MISC I-MISC")])
  assert counts.correct == {"MISC": 1}


def test_no_entities_gives_zero_scores_not_an_error():
  results = conll.metrics(conll.count([_pairs("O O", "O O")]))
  assert (results["eval_precision"], results["eval_recall"],
          results["eval_f1"], results["eval_accuracy"]) == (0.0, 0.0, 0.0,
                                                            1.0)


def test_all_o_baseline_has_zero_recall():
  counts = conll.count([_pairs("B-PER O B-LOC", "O O O")])
  results = conll.metrics(counts)
  assert (results["eval_recall"], results["eval_f1"]) == (0.0, 0.0)
  assert results["eval_accuracy"] == pytest.approx(1 / 3)


def test_report_in_conlleval_layout():
  counts = conll.count([_pairs("B-ORG O B-PER O O B-LOC O",
                               "B-ORG O B-PER I-PER O B-LOC O")])
  assert conll.report(counts) == (
      "processed 7 tokens with 3 phrases; found: 3 phrases; correct: 2.\n"
      "accuracy:  85.71%; precision:  66.67%; recall:  66.67%; FB1:  66.67\n"
      "              LOC: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
      "              ORG: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
      "              PER: precision:   0.00%; recall:   0.00%; FB1:   0.00  1\n")


def test_predictions_text_is_conll_format(tmp_path):
  documents, _ = conll.read_file(_write(tmp_path, IOB1_TEXT), "iob1")
  predicted = [["I-ORG", "O", "O", "O", "O"], ["I-PER", "I-PER"],
               ["I-LOC", "O"]]
  assert conll.predictions_text(documents, predicted) == (
      "EU I-ORG I-ORG\nrejects O O\nGerman I-MISC O\ncall O O\n. O O\n\n"
      "Peter I-PER I-PER\nBlackburn I-PER I-PER\n\n"
      "BRUSSELS I-LOC I-LOC\n1996-08-22 O O\n\n")
  untagged, _ = conll.read_file(_write(tmp_path, "a\nb\n", "test.txt"),
                                "iob1")
  assert conll.predictions_text(untagged, [["O", "B-PER"]]) == (
      "a O\nb B-PER\n\n")


def test_report_rounds_as_conlleval_computes():
  # 5 correct of 31 guessed and 33 gold: conlleval computes percentages
  # first (16.129..., 15.151...), whose harmonic mean it prints as 15.63;
  # from fractions the same number lands just under 15.625 and prints
  # 15.62.
  counts = conll.Counts()
  counts.tokens, counts.correct_tags = 40, 4
  counts.gold["PER"], counts.guessed["PER"], counts.correct["PER"] = 33, 31, 5
  assert "FB1:  15.63\n" in conll.report(counts)
