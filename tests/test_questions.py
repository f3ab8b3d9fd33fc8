from pathlib import Path

import pytest
import yaml

from mediaindex.search.questions import sought

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(
    ("question", "phrase"),
    [
        ("Where does someone say workers of the world unite?", "workers of the world unite"),
        ("Which recording mentions the specter of communism?", "the specter of communism"),
        ("Who says ask not what your country can do for you?", "ask not what your country can do for you"),
        ("In which file does the narrator refuse to talk about his past?", "refuse to talk about his past"),
        ("Is there a video with a parrot?", "a parrot"),
        ("Where can I see a deer?", "a deer"),
        ("Where is Guizot mentioned?", "Guizot"),
        ("where is the text version of this audiobook", "the text version of this audiobook"),
        ("Wo sagt jemand: Proletarier aller Länder, vereinigt euch?", "Proletarier aller Länder, vereinigt euch"),
        ("In welcher Aufnahme heißt es „Ein Gespenst geht um in Europa“?", "Ein Gespenst geht um in Europa"),
        ("Wo kommt ein Papagei vor?", "ein Papagei"),
        ("Wo ist von Guizot die Rede?", "Guizot"),
        ("Wo wird gesagt, dass der Horizont sehr weit entfernt scheint?", "der Horizont sehr weit entfernt scheint"),
        ("만국의 노동자여 단결하라는 말은 어디에 나오나요?", "만국의 노동자여 단결하라"),
        ("유령이 유럽을 배회하고 있다는 문장은 어디에 있나요?", "유령이 유럽을 배회하고 있다"),
        ("앵무새가 나오는 영상은?", "앵무새"),  # the subject particle goes: the index holds the label's word
        ("사슴이 나오는 장면은 어디인가요?", "사슴"),
        ("고양이가 나오는 영상", "고양이"),  # 가 after a final vowel; the noun's own 이 stays
        ("누가 '조국이 당신을 위해 무엇을 할 수 있는지 묻지 마십시오'라고 말했나요?",
         "조국이 당신을 위해 무엇을 할 수 있는지 묻지 마십시오"),
        ('Who said "ask not"?', "ask not"),
        ("Find the part where someone says banana", "banana"),
        ("Show me the scene with a parrot", "a parrot"),
        ("Zeig mir die Stelle, wo jemand über Guizot spricht", "Guizot"),
        ("Zeig mir die Stelle, wo ein Papagei zu sehen ist", "ein Papagei"),
        ("만국의 노동자여 단결하라는 부분을 찾아줘", "만국의 노동자여 단결하라"),
        ("앵무새가 나오는 장면을 보여줘", "앵무새"),
        ("Show me the money", "the money"),
        ("공산주의에 대한 이야기는 어디에 나오나요?", "공산주의"),
        ("공산주의에 대해 말하는 부분은?", "공산주의"),
        ("Zeig mir einen Papagei", "einen Papagei"),
        ("Where does «la vie en rose» play?", "la vie en rose"),
    ],
)
def test_the_phrase_a_question_asks_about(question: str, phrase: str) -> None:
    assert sought(question) == phrase


@pytest.mark.parametrize("query", [
    "What does the manifesto say is haunting Europe?",  # a question, but no frame around a phrase
    "don't stop me now", "it's the economy", "Ein Gespenst geht um in Europa", "김치볶음밥 만드는 법",
    "Where?", "어디에 나오나요?", "Who says?", "a meadow with trees under pink clouds", "", "Show me", "Wer sagt das?",
    "보여줘", "find my way home", "show business", "play the game", "Finde Nemo",  # no request frame
])
def test_other_queries_are_searched_as_typed(query: str) -> None:
    assert sought(query) is None


def test_the_labelled_queries_are_no_questions_but_one() -> None:
    # The calibration and recall sets are searched as they always were; one speech query is a question.
    asked = {}
    for name in ("search_queries.yaml", "search_queries_heldout.yaml", "search_queries_names.yaml"):
        for q in yaml.safe_load((BENCHMARKS / name).read_text(encoding="utf-8")):
            if (phrase := sought(q["query"])) is not None:
                asked[q["query"]] = phrase
    assert asked == {"where is the text version of this audiobook": "the text version of this audiobook"}
